"""The copy ceiling every floor divides by: N read-modify-write passes over one large array
inside one jitted ``fori_loop`` (the host's per-call cost paid once for N passes), beside the
copies and the read timed one per host call (the ceiling before)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import benchlib
from benchlib.accelerator import hlo_ops
from benchlib.accelerator.sizes import Sizes


def median_ms(fn: Callable[[], Any], sizes: Sizes) -> float:
    """Median ms of ``fn`` (results waited for) after ``sizes.warmup`` calls."""
    waited = lambda: jax.block_until_ready(fn())
    return 1e3 * benchlib.median_time(waited, sizes.repeats, max(sizes.warmup, 1))[0]


@functools.partial(jax.jit, static_argnames=("passes",), donate_argnums=(0,))
def passes_program(x, c, *, passes: int):
    """``passes`` times ``x = x * c + i`` (``i`` the pass index, so that no two passes can be
    merged into one) over all of ``x``: each pass reads and writes every byte once."""
    body = lambda i, x: x * c + i.astype(x.dtype)
    return jax.lax.fori_loop(0, passes, body, x)


def in_program_copy(sizes: Sizes) -> dict:
    """Bytes read + written per second by :func:`passes_program` on a bf16 array of
    ``sizes.ceiling_bytes`` (``2 * bytes * passes / time``, median after warm-up), and whether
    the compiled program kept the loop (a program that fused the passes into one would
    overstate the bandwidth by ``passes``)."""
    n, passes = sizes.ceiling_bytes // 2, sizes.ceiling_passes
    c = jnp.asarray(1.0, jnp.bfloat16)  # an argument: no pass simplifies away
    box = [jnp.zeros((n,), jnp.bfloat16)]  # the array is donated to each call and replaced
    compiled = passes_program.lower(box[0], c, passes=passes).compile()
    kept = hlo_ops.count_ops(compiled.as_text())["while"] > 0

    def run():
        box[0] = compiled(box[0], c)
        return box[0]

    ms = median_ms(run, sizes)
    moved = 2 * n * 2 * passes
    return dict(
        what=f"in one program: {passes} × (x·c + i), bf16",
        mib=n * 2 / (1 << 20),
        ms=ms,
        gb_s=moved / ms / 1e6,
        loop_kept=kept,
    )


HOST_OPS = {
    "per host call: jnp.copy(x), f32": (jnp.copy, 2),
    "per host call: x + 1, f32": (lambda x: x + 1, 2),
    "per host call: sum(x), f32 (read only)": (jnp.sum, 1),
}
"""Operation -> (jitted function of a float32 array, bytes moved per byte of the array)."""


def host_timed(sizes: Sizes) -> list[dict]:
    """Bandwidth of :data:`HOST_OPS`, one call per sample, on a float32 array of
    ``sizes.copy_bytes``."""
    x = jnp.ones(sizes.copy_bytes // 4, jnp.float32)
    rows = []
    for what, (fn, moved) in HOST_OPS.items():
        compiled = jax.jit(fn).lower(x).compile()
        ms = median_ms(lambda compiled=compiled: compiled(x), sizes)
        rows.append(
            dict(what=what, mib=x.nbytes / (1 << 20), ms=ms, gb_s=moved * x.nbytes / ms / 1e6)
        )
    return rows


def measure_bandwidth(sizes: Sizes) -> dict[str, Any]:
    """``copy``: the in-program ceiling (:func:`in_program_copy`, bytes/s), or, where that
    failed (``in_program_error``), the host-timed one; ``host_copy``: the faster copy timed per
    host call; ``rows``: every measurement."""
    try:
        inside, error = in_program_copy(sizes), None
    except Exception as err:  # the floors still get a ceiling: the host-timed one
        inside, error = None, f"{type(err).__name__}: {str(err)[:500]}"
    host = host_timed(sizes)
    copies = [row for row, (_, moved) in zip(host, HOST_OPS.values(), strict=True) if moved == 2]
    fastest = max(copies, key=lambda row: row["gb_s"])
    best = inside or fastest
    return {
        "copy": best["gb_s"] * 1e9,
        "copy_op": best["what"],
        "in_program": inside is not None,
        "in_program_error": error,
        "host_copy": fastest["gb_s"] * 1e9,
        "host_copy_op": fastest["what"],
        "rows": [row for row in (inside, *host) if row is not None],
    }
