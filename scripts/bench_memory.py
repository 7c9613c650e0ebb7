r"""Per-device memory of sharded speculative decoding for full-size Llamas, allocating nothing.

  python scripts/bench_memory.py                        # Llama-3-70B target, 8B draft, 8x8 mesh
  python scripts/bench_memory.py --target=llama3-8b --draft=none --meshes=1,8;2,4;8,1 \
      --devices=8 --compile=False
  python scripts/bench_memory.py --output=/tmp/bench_memory.md   # the BENCHMARKS.md tables

Everything is abstract: parameters come from ``jax.eval_shape`` (``nnx.eval_shape``), the decode
state from ``jax.eval_shape(init_state)``, and the sharded speculative step is lowered and
compiled for a mesh of emulated CPU devices (``--devices``, default 64) only to read XLA's memory
analysis. Two views per mesh:

* analytic per-device bytes of parameters, KV caches and the ``[B, K, L+1, V]`` probability
  buffers, from each array's shape and its sharding's shard shape;
* with ``--compile``, the compiled step's memory analysis (arguments, outputs, temporaries) per
  device. It is XLA:CPU's buffer assignment: TPU/GPU compilers fuse differently, so temporaries
  differ, while argument sizes (weights, caches, state) carry over.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

_DEVICES = flags.DEFINE_integer("devices", 64, "Emulated CPU devices.")
_TARGET = flags.DEFINE_string("target", "llama3-70b", "Target preset.")
_DRAFT = flags.DEFINE_string("draft", "llama3-8b", "Draft preset, or 'none'.")
_DRAFT_TP = flags.DEFINE_bool("draft_tp", True, "Shard the draft like the target (else replicate).")
_MESHES = flags.DEFINE_string("meshes", "8,8", "';'-separated (data, model) mesh shapes.")
_BATCH = flags.DEFINE_integer("batch", 8, "B (a multiple of the data axis).")
_CAPACITY = flags.DEFINE_integer("capacity", 4096, "KV-cache slots S per row.")
_PATHS = flags.DEFINE_integer("paths", 3, "K.")
_DRAFT_LEN = flags.DEFINE_integer("draft_len", 4, "L.")
_VERIFIER = flags.DEFINE_string("verifier", "gbv", "Verifier of the compiled step.")
_DTYPE = flags.DEFINE_string("dtype", "", "Override the presets' dtype (e.g. float32).")
_COMPILE = flags.DEFINE_bool("compile", True, "Also compile the step for XLA's memory analysis.")
_OUTPUT = flags.DEFINE_string("output", "", "Write the markdown report here.")

GIB = 2**30


def _set_devices(argv) -> None:
    """Emulated devices must be configured before JAX initialises its backend."""
    count = next((a.split("=", 1)[1] for a in argv if a.startswith("--devices=")), "64")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={count}"
    )


def shard_bytes(shape, dtype, sharding) -> int:
    """Bytes one device holds of an array of ``shape`` under ``sharding``."""
    import math

    import numpy as np

    return math.prod(sharding.shard_shape(tuple(shape))) * np.dtype(dtype).itemsize


def analyse(target_name: str, draft_name: str, mesh_shape: str) -> dict:
    """Abstract model, state and step on one mesh: per-device bytes by kind."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from specjax import sharding
    from specjax.decode import DecodeConfig
    from specjax.decode.seams import constrain_state, init_state, state_shardings, step
    from specjax.drafters import ModelDrafter
    from specjax.models import Decoder, preset
    from specjax.models.pure import PureModel
    from specjax.sampling import SamplingParams

    mesh = sharding.make_mesh(mesh_shape)
    b, k, l_len = _BATCH.value, _PATHS.value, _DRAFT_LEN.value
    sharding.check_batch(b, mesh)

    def abstract(name, tensor_parallel):
        dtypes = dict(dtype=_DTYPE.value, param_dtype=_DTYPE.value) if _DTYPE.value else {}
        config = preset(name, **dtypes)
        if tensor_parallel:
            sharding.check_model(config, mesh, name)
        module = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
        specs = sharding.param_shardings(module, mesh, replicated=not tensor_parallel)
        model = PureModel.of(module)
        placed = jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
            model.state,
            _like(model.state, specs),
        )
        return PureModel(model.graphdef, placed), config

    target, t_cfg = abstract(target_name, True)
    sampling = SamplingParams(1.0)
    drafter = None
    verifier = _VERIFIER.value
    if draft_name != "none":
        draft, _ = abstract(draft_name, _DRAFT_TP.value)
        drafter = ModelDrafter(draft, num_paths=k, draft_len=l_len, sampling=sampling)
    else:
        verifier, k, l_len = "autoregressive", 1, 0
    config = DecodeConfig(verifier, sampling, max_new_tokens=64)
    rows = NamedSharding(mesh, P("data"))
    prompts = jax.ShapeDtypeStruct((b, 64), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    lengths = jax.ShapeDtypeStruct((b,), jnp.int32, sharding=rows)
    capacity = _CAPACITY.value
    state = jax.eval_shape(
        lambda t, d, p, n: init_state(
            t, d, p, n, jax.random.key(0), capacity=capacity, buffer=capacity
        ),
        target,
        drafter,
        prompts,
        lengths,
    )
    draft_tp = drafter is not None and _DRAFT_TP.value
    s_specs = state_shardings(state, mesh, draft_tp)
    state = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, s_specs
    )

    leaves = lambda tree: jax.tree.leaves(tree)
    nbytes = lambda tree: sum(shard_bytes(x.shape, x.dtype, x.sharding) for x in leaves(tree))
    report = {
        "mesh": mesh_shape,
        "target params": nbytes(target.state),
        "draft params": nbytes(drafter.model.state) if drafter is not None else 0,
        "target KV cache": nbytes(state.target_cache),
        "draft KV cache": nbytes(state.draft_state) if drafter is not None else 0,
    }
    vocab_rows = NamedSharding(mesh, P("data", None, None, "model"))
    probs_shape = (b, k, l_len + 1, t_cfg.vocab_size)
    report["[B, K, L+1, V] probs"] = shard_bytes(probs_shape, jnp.float32, vocab_rows)
    report["probs shape"] = probs_shape
    if _COMPILE.value:
        fn = jax.jit(
            lambda t, d, s: constrain_state(step(t, d, s, config), mesh, draft_tp),
            out_shardings=s_specs,
            donate_argnums=2,
        )
        compiled = fn.lower(target, drafter, state).compile()
        analysis = compiled.memory_analysis()
        report["compiled arguments"] = analysis.argument_size_in_bytes
        report["compiled outputs"] = analysis.output_size_in_bytes
        report["compiled temporaries"] = analysis.temp_size_in_bytes
        report["compiled aliased"] = analysis.alias_size_in_bytes
    return report


def _like(state, specs):
    """``specs`` (an nnx.State with one sharding per variable) with ``state``'s structure."""
    import jax

    return jax.tree.unflatten(jax.tree.structure(state), jax.tree.leaves(specs))


def _size(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB / 100 else f"{n / 2**20:.1f} MiB"


def render(reports: list[dict], title: str) -> str:
    import benchlib

    kinds = [k for k in reports[0] if k not in ("mesh", "probs shape")]
    body = [[r["mesh"], *(_size(r[k]) for k in kinds)] for r in reports]
    return f"### {title}\n\n" + benchlib.table(["mesh (data, model)", *kinds], body)


def main(argv):
    del argv
    import datetime

    import benchlib  # imported after _set_devices configured the emulated devices
    import jax

    reports = []
    for mesh_shape in _MESHES.value.split(";"):
        try:
            reports.append(analyse(_TARGET.value, _DRAFT.value, mesh_shape.strip()))
        except ValueError as err:
            print(f"mesh {mesh_shape}: skipped: {err}", flush=True)
            continue
        print(reports[-1], flush=True)
    if not reports:
        sys.exit("error: no mesh could hold the model; see the messages above")
    placement = "tensor-parallel" if _DRAFT_TP.value else "replicated"
    draft = (
        "no draft (autoregressive step)"
        if _DRAFT.value == "none"
        else f"{_DRAFT.value} draft ({placement})"
    )
    title = (
        f"{_TARGET.value} target, {draft}, "
        f"B={_BATCH.value}, S={_CAPACITY.value}, K={_PATHS.value}, L={_DRAFT_LEN.value}, "
        f"verifier {_VERIFIER.value}; per-device bytes"
    )
    head = (
        f"Command: `{benchlib.command()}`  \n"
        f"Machine: {benchlib.machine()}, "
        f"{len(jax.devices())} emulated devices; {datetime.date.today()}; nothing allocated "
        "(eval_shape + compile only).  \n"
        f"Probability buffer shape {reports[0]['probs shape']} (float32, rows over data, vocab "
        "over model)."
    )
    text = head + "\n\n" + render(reports, title) + "\n"
    print(text)
    if _OUTPUT.value:
        with open(_OUTPUT.value, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    _set_devices(sys.argv)
    app.run(main)
