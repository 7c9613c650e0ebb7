r"""A GPU lease's check of the attention kernels (``specjax.models.attention_kernels``): for each
kernel behind ``attention.KERNEL`` ("xla", the reference; "pallas"; "cudnn"), per shape, how far
its output is from the XLA path's (and both from an fp32 reference), and the device time of one
attention call, timed as ``--iters`` calls inside one compiled loop (no host round trip per
call). Shapes: SmolLM2-135M's heads (G 3, R 3, E 64) and Llama-3-8B's (G 8, R 4, E 128), one new
token (decode) and a K = 3, L = 4 tree (13), B 1 and 8, rows of ragged lengths around half the
capacity; bf16 for every kernel, and fp32 at B 1 (where Triton's dots may run in TF32) for
"pallas". One table last; ``--quick`` runs tiny shapes in Pallas' interpret mode on a CPU.

    PYTHONPATH=. python scripts/check_attention_kernels.py --out=$OUT  # not yet run on a GPU
    PYTHONPATH=. python scripts/check_attention_kernels.py --quick     # ~2 min on 2 CPU cores
"""

from __future__ import annotations

import time

import benchlib
import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from jax import lax

from specjax import tree
from specjax.models import attention

_QUICK = flags.DEFINE_bool("quick", False, "Tiny shapes (a CPU: Pallas in interpret mode).")
_ITERS = flags.DEFINE_integer("iters", 50, "Attention calls per timed loop.")
_CAPACITY = flags.DEFINE_integer("capacity", 4096, "Cache capacity S.")
_OUT = flags.DEFINE_string("out", "", "Write the Markdown report to this directory.")

HEADS = {"smollm2 G3 R3 E64": (3, 3, 64), "llama3-8b G8 R4 E128": (8, 4, 128)}
QUICK_HEADS = {"tiny G2 R2 E16": (2, 2, 16)}


def inputs(b, t, g, r, e, s, dtype, seed=0):
    """Queries, a one-layer cache, lengths from S/4 to S/2 (row 0 the longest) and the mask
    (one token, or a K = 3, L = 4 tree)."""
    keys = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(keys[0], (b, t, g, r, e), dtype)
    cache_k, cache_v = (jax.random.normal(keys[i], (1, b, s, g, e), dtype) for i in (1, 2))
    low, high = s // 4, s // 2
    lengths = jax.random.randint(keys[3], (b,), low, high).at[0].set(high).astype(jnp.int32)
    if t == 1:
        mask = jnp.ones((b, 1, 1), bool)
    else:
        mask = jnp.broadcast_to(jnp.asarray(tree.tree_mask(3, 4)), (b, t, t))
    return q, cache_k, cache_v, lengths, mask


def attend_with(kernel, dtype):
    """A fresh jitted call of ``attention.attend`` traced with ``attention.KERNEL = kernel``."""

    def run(q, ck, cv, lengths, mask):
        previous, attention.KERNEL = attention.KERNEL, kernel
        try:
            scale = q.shape[-1] ** -0.5
            return attention.attend(q, ck, cv, 0, lengths, mask, scale=scale, dtype=dtype)
        finally:
            attention.KERNEL = previous

    return jax.jit(run)


def looped(kernel, dtype, iters):
    """``iters`` attention calls in one program, each call's output the next one's queries."""
    one = attend_with(kernel, dtype)

    def run(q, ck, cv, lengths, mask):
        body = lambda i, q: one(q, ck, cv, lengths, mask).astype(q.dtype)
        return lax.fori_loop(0, iters, body, q)

    return jax.jit(run)


def seconds(fn, args, repeats=3):
    """Median wall seconds of ``fn(*args)`` after a first (compiling) call."""
    jax.block_until_ready(fn(*args))  # compile and warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def cases(quick: bool):
    """``(heads name, G, R, E, B, T, dtype, kernels)`` to run."""
    heads = QUICK_HEADS if quick else HEADS
    for name, (g, r, e) in heads.items():
        for b in (1, 2) if quick else (1, 8):
            for t in (1, tree.tree_size(3, 4)):
                yield name, g, r, e, b, t, jnp.bfloat16, ("xla", "pallas", "cudnn")
                if b == 1 and (quick or name.startswith("smollm2")):  # TF32 or not
                    yield name, g, r, e, b, t, jnp.float32, ("xla", "pallas")


def main(_):
    gpu = jax.default_backend() == "gpu"
    s = 96 if _QUICK.value else _CAPACITY.value
    iters = 3 if _QUICK.value else _ITERS.value
    rows = []
    for name, g, r, e, b, t, dtype, names in cases(_QUICK.value):
        args = inputs(b, t, g, r, e, s, dtype)
        wide = [x.astype(jnp.float32) if x.dtype == dtype else x for x in args]
        truth = np.asarray(attend_with("xla", jnp.float32)(*wide), np.float32)
        ref = None
        for kernel in names:
            if kernel == "cudnn" and not gpu:
                continue
            cell = [name, b, t, jnp.dtype(dtype).name, kernel]
            benchlib.log(" ".join(map(str, cell)))
            try:
                out = np.asarray(attend_with(kernel, dtype)(*args), np.float32)
                per_call = seconds(looped(kernel, dtype, iters), args) / iters
            except Exception as err:  # a lowering failure is a result here
                rows.append([*cell, "-", "-", "-", f"{type(err).__name__}: {str(err)[:80]}"])
                continue
            ref = out if kernel == "xla" else ref
            vs_xla = float(np.abs(out - ref).max()) if ref is not None else float("nan")
            vs_f32 = float(np.abs(out - truth).max())
            rows.append([*cell, f"{vs_xla:.2e}", f"{vs_f32:.2e}", f"{per_call * 1e6:.1f}", ""])
    header = ["heads", "B", "T", "dtype", "kernel", "max |Δ| vs xla", "vs fp32", "µs/call", "error"]
    title = f"# Attention kernels, S = {s}, {iters} calls per timed loop"
    text = "\n".join([title, "", benchlib.machine(), "", benchlib.table(header, rows, 5), ""])
    benchlib.write_report(text, f"{_OUT.value}/check_attention_kernels.md" if _OUT.value else None)


if __name__ == "__main__":
    app.run(main)
