# %% [markdown]
# # Sharded decoding on a device mesh (8 emulated CPU devices)
#
# specjax decodes over a `jax.sharding.Mesh` with axes `('data', 'model')`: tensor parallelism
# over `model` (attention heads, MLP width and vocabulary split), the batch over `data`. One
# rules table in `specjax.sharding` maps each parameter's logical axis names to mesh axes.
#
# No accelerator needed: XLA can pretend the CPU is 8 devices. That flag must be set **before
# JAX is imported**, so this notebook sets it in its first cell after the set-up (on Colab, if
# you imported JAX earlier in the session: Runtime → Restart session, then run from the top).
# We then check that the sharded generation gives exactly the single-device tokens.

# %%
import os
import sys

assert "jax" not in sys.modules, "JAX is already imported: restart the kernel and run from the top"
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"  # (on a GPU/TPU runtime, still emulate CPU devices)

import jax

from specjax import sharding
from specjax.decode import DecodeConfig, generate
from specjax.decode.seams import compile_generation
from specjax.drafters import ModelDrafter
from specjax.models import load_model
from specjax.sampling import SamplingParams

print(jax.devices())

# %% [markdown]
# ## The mesh and the sharded parameters
#
# `make_mesh("2,4")`: 2 devices along `data` × 4 along `model`. `load_model(path, mesh=mesh)`
# places every parameter straight onto the mesh, shard by shard (an orbax checkpoint is
# restored directly into its sharding): the target tensor-parallel, the draft here replicated
# on every device (`replicated=True`; it is small).

# %%
mesh = sharding.make_mesh("2,4")  # axes ("data", "model")
print(mesh)
print("rules (logical axis -> mesh axis):", dict(sharding.RULES))

target, tokenizer = load_model("checkpoints/shakespeare/target", mesh=mesh)
draft, _ = load_model("checkpoints/shakespeare/draft", mesh=mesh, replicated=True)

layer = target.layers[0]
params = {
    "target embed [V, D]": target.embed[...],
    "target wq [D, H, E]": layer.attn.wq[...],
    "target wk [D, G, E]": layer.attn.wk[...],
    "target w_down [F, D]": layer.mlp.w_down[...],
    "draft embed [V, D]": draft.embed[...],
}
print(f"\n{'parameter':24}{'global shape':>16}  {'PartitionSpec':28}{'per-device shard':>18}")
for name, x in params.items():
    shard = sharding.shard_shapes(x)[0]
    print(f"{name:24}{x.shape!s:>16}  {x.sharding.spec!s:28}{shard!s:>18}")

# %% [markdown]
# Q/K/V are column-parallel (heads split over `model`: 8 query heads → 2 per device), the
# down projection row-parallel, the tied embedding vocab-parallel (256 → 64 rows per device).
#
# ## The KV caches and decode state
#
# `generate(..., mesh=mesh)` compiles the whole generation with explicit in/out shardings.
# `compile_generation` returns the same two compiled programs for inspection: the layouts of
# the decode state they produce are in `output_shardings`.

# %%
greedy = SamplingParams(temperature=0.0)
config = DecodeConfig("block", greedy, max_new_tokens=64)
texts = ["ROMEO:\n", "JULIET:\nO Romeo, Romeo", "HAMLET:\nTo be, or not", "KING LEAR:\n"]
prompts = [tokenizer.encode(t) for t in texts]
drafter = ModelDrafter(draft, num_paths=1, draft_len=4, sampling=greedy)

prefill, decode = compile_generation(target, prompts, config, drafter, mesh=mesh)
state = prefill.output_shardings  # a DecodeState of NamedShardings
shapes = prefill.out_info  # ... and of shapes
rows = [
    ("target KV cache k [N, B, S, G, E]", state.target_cache.k, shapes.target_cache.k),
    ("draft KV cache k", state.draft_state.k, shapes.draft_state.k),
    ("cache lengths [B]", state.target_cache.lengths, shapes.target_cache.lengths),
    ("tokens [B, T]", state.tokens, shapes.tokens),
]
for name, s, x in rows:
    print(f"{name:34}{x.shape!s:>24}  {s.spec!s:36} shard {s.shard_shape(x.shape)}")

# %% [markdown]
# The caches split rows over `data` and KV heads over `model` (4 KV heads → 1 per device); the
# draft's, replicated like its weights, only its rows. Tokens and counters leave the program
# replicated, so every process of a multi-host run can read them.
#
# ## Sharded output == single-device output, token for token

# %%
sharded = generate(target, prompts, config, drafter, mesh=mesh)

one_target, _ = load_model("checkpoints/shakespeare/target")  # one device, no mesh
one_draft, _ = load_model("checkpoints/shakespeare/draft")
one_drafter = ModelDrafter(one_draft, draft_len=4, sampling=greedy)
single = generate(one_target, prompts, config, one_drafter)
print("devices holding the single-device weights:", one_target.embed[...].devices())

print("greedy: sharded == single device:", sharded.tokens == single.tokens)
for text, row in zip(texts, sharded.tokens, strict=True):
    print(repr(text + tokenizer.decode(row)))

# %% [markdown]
# At temperature 1 the same seed gives the same sample on the mesh as on one device (each row
# draws from its own key, `fold_in(key(seed), row)`), here with GBV over K = 3 draft paths.
# (The draft could be tensor-parallel as well, `load_model(path, mesh=mesh)`, on a mesh whose
# `model` axis divides its 2 KV heads: `make_mesh("4,2")`.)

# %%
t1 = SamplingParams(temperature=1.0)
config1 = DecodeConfig("gbv", t1, max_new_tokens=64)
drafter1 = ModelDrafter(draft, num_paths=3, sampling=t1)
one_drafter1 = ModelDrafter(one_draft, num_paths=3, sampling=t1)
sharded1 = generate(target, prompts, config1, drafter1, 7, mesh)
single1 = generate(one_target, prompts, config1, one_drafter1, 7)
print("T = 1, GBV, K = 3: sharded == single device:", sharded1.tokens == single1.tokens)
print(sharded1.metrics.table())

# %% [markdown]
# The same from the command line:
# `python -m specjax.decode --config configs/shakespeare.py --config.mesh_shape=2,4
# --config.num_cpu_devices=8 --config.batch_size=2`. On real hardware drop `num_cpu_devices`;
# multi-host runs add `--config.coordinator_address` (see the README's "Sharded and multi-host
# decoding").
