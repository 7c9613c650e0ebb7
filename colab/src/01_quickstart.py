# %% [markdown]
# # specjax quickstart: speculative decoding on the shipped Shakespeare pair
#
# A cheap **draft** model proposes a few tokens, the **target** model scores them all in one
# forward pass, and a **verifier** accepts a prefix and emits one more token, so that the output
# has exactly the distribution of the target decoding alone.
#
# This notebook runs the default pair that ships with specjax (`checkpoints/shakespeare/`: a
# 3.2M-parameter byte-level target and its distilled 0.43M-parameter draft) with **block
# verification**, prints the metrics, plots how many draft tokens were accepted, and measures
# the speedup over autoregressive decoding of the same target on the same code path. It runs on
# a CPU runtime in well under a minute.

# %%
import dataclasses

import matplotlib.pyplot as plt
import numpy as np

from specjax.decode import DecodeConfig, generate
from specjax.drafters import ModelDrafter
from specjax.models import load_pretrained
from specjax.sampling import SamplingParams

plt.rcParams["figure.dpi"] = 72

# %% [markdown]
# ## Load the pair
#
# `load_pretrained` reads a specjax checkpoint (also a `.gguf` file or a Hugging Face
# directory) and returns the Flax NNX model, its config and its tokenizer.

# %%
target = load_pretrained("checkpoints/shakespeare/target")
draft = load_pretrained("checkpoints/shakespeare/draft")
print(target.config)
print(draft.config)

# %% [markdown]
# ## Generate
#
# The drafter proposes `draft_len = 4` tokens per step from the draft model; block
# verification (Sun et al., ICLR'25) decides how many to keep. Temperature, top-k and top-p
# are applied identically to drafting and verification. The first call compiles two programs
# (prefill and the decode loop); later calls with prompts of similar shape reuse them.

# %%
sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0)
drafter = ModelDrafter(draft.model, num_paths=1, draft_len=4, sampling=sampling)
config = DecodeConfig("block", sampling, max_new_tokens=128)
texts = ["ROMEO:\n", "JULIET:\n"]
prompts = [target.tokenizer.encode(t) for t in texts]

out = generate(target.model, prompts, config, drafter, seed=0)
for text, row in zip(texts, out.tokens, strict=True):
    print("-" * 60)
    print(text + target.tokenizer.decode(row))

# %% [markdown]
# ## Speedup over autoregressive decoding
#
# `verifier="autoregressive"` is the baseline on the same code path: the same model, sampling
# and commit, one target forward per token. Speedup = autoregressive time / speculative time
# for the same prompts and length, compile time excluded.

# %%
baseline = generate(
    target.model, prompts, dataclasses.replace(config, verifier="autoregressive"), seed=0
)
metrics = out.metrics.with_speedup(baseline.metrics.seconds)
print(metrics.table())
print(f"\nautoregressive: {baseline.metrics.tokens_per_second:.0f} tokens/s")

# %% [markdown]
# Every target forward emits `block efficiency` tokens on average instead of one. On this
# pair, though, the target is only 3.2M parameters: on a CPU one of its forward passes costs
# about as much as the draft's four, so the speedup stays near 1×. Speculation pays when the
# target is much more expensive than the draft (see `03_real_weights.ipynb` for a 135M model).

# %% [markdown]
# ## Where drafts are accepted
#
# Per-position acceptance: of the steps that proposed draft position *i*, the fraction that
# accepted it. Accepted-length histogram: steps by the number τ of draft tokens accepted
# (τ = 4: the whole draft, plus the bonus token).

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
pos = np.arange(1, len(metrics.per_position_acceptance) + 1)
ax1.bar(pos, metrics.per_position_acceptance, color="tab:blue")
ax1.set(xlabel="draft position", ylabel="acceptance", ylim=(0, 1), xticks=pos)
ax1.set_title("per-position acceptance")
hist = np.asarray(metrics.accepted_length_histogram)
ax2.bar(np.arange(len(hist)), hist / hist.sum(), color="tab:orange")
ax2.set(xlabel="accepted draft tokens τ", ylabel="fraction of steps", xticks=range(len(hist)))
ax2.set_title(f"accepted length (block efficiency {metrics.block_efficiency:.2f})")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Greedy decoding is unchanged, token for token
#
# At temperature 0 speculative decoding must return exactly the autoregressive output.

# %%
greedy = SamplingParams(temperature=0.0)
g_config = DecodeConfig("block", greedy, max_new_tokens=64)
g_drafter = ModelDrafter(draft.model, draft_len=4, sampling=greedy)
spec = generate(target.model, prompts, g_config, g_drafter)
auto = generate(target.model, prompts, dataclasses.replace(g_config, verifier="autoregressive"))
print("greedy speculative == greedy autoregressive:", spec.tokens == auto.tokens)
print(target.tokenizer.decode(spec.tokens[0]))

# %% [markdown]
# Next: `02_verifiers.ipynb` (every verifier, exactness, optimal acceptance),
# `03_real_weights.ipynb` (SmolLM2-135M), `04_sharded.ipynb` (device meshes), `05_ssd.ipynb`
# (speculative speculative decoding). The same run from the command line:
# `python -m specjax.decode --config configs/shakespeare.py`.
