"""Row chunking: a batched verifier body run a few batch rows at a time on CPU.

Every verifier treats the rows of a batch independently, so ``core(*args)`` on the whole batch
equals ``core`` on chunks of rows, concatenated. On XLA:CPU the chunked form is several times
faster once a batch of ``[L, V]`` rows outgrows the caches: a fused elementwise-then-reduce over
``[64, 4, 131072]`` (block verification's ``Z``) took 20-30x the time of reading its inputs
once, the same work on chunks of 2 rows 1.5x (2026-11-23, 2-core EPYC, jax 0.10.2). Other backends
run ``core`` on the whole batch (the choice is made per platform by
``lax.platform_dependent``, so one program serves both): the ``lax.map`` loop is on the CPU
only, and a GPU step has no loop from it.

The randomness is drawn for the whole batch *before* chunking and passed in, so the outputs are
the same whether or not a batch is chunked.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from specjax.typing import Array

CHUNK_BYTES = 16 << 20
"""Largest chunk of rows (summed over the arguments) kept together on CPU: it stays in the L3
cache with room for the temporaries, in few chunks (each a round of small kernels). 16 MiB
against 4: block 1.64x read-once instead of 1.89x at B = 64, L = 4, V = 32768 (chunks of 8 rows
instead of 2), the other verifiers the same or faster (2026-11-29, the same CPU)."""


def chunk_rows(batch: int, row_bytes: int, budget: int | None = None) -> int:
    """Rows per chunk: the largest divisor of ``batch`` whose rows fit in ``budget`` bytes
    (default :data:`CHUNK_BYTES`), and at least 2 where ``batch`` allows it (chunks of one row
    make XLA:CPU copy the inputs)."""
    budget = CHUNK_BYTES if budget is None else budget
    fits = max(1, budget // max(row_bytes, 1))
    divisors = [c for c in range(1, batch + 1) if batch % c == 0]
    best = max(c for c in divisors if c <= fits)
    if best == 1 and batch > 1:
        best = min(c for c in divisors if c > 1)
    return best


def map_row_chunks(core: Callable[..., object], *args: Array, whole: tuple = ()) -> object:
    """``core(*args)`` with every argument's leading axis the batch ``B``; on CPU computed over
    chunks of rows with ``lax.map`` (see the module docstring).

    Args:
      core: a batched function whose rows do not interact (row b of every output depends only
        on row b of every argument), returning a pytree of ``[B, ...]`` arrays.
      *args: arrays ``[B, ...]``.
      whole: arrays ``[B, ...]`` passed whole to every chunk, for ``core`` to gather its rows
        from: ``core(*chunk_args, *whole, rows)`` with ``rows`` the int32 ``[c]`` batch
        indices of the chunk. A chunk sliced out of an array that a loop inside ``core``
        reads is copied first on XLA:CPU (the whole chunk, every chunk).

    Returns:
      ``core(*args)`` (``core(*args, *whole, arange(B))`` with ``whole``).
    """
    b = args[0].shape[0]
    row_bytes = sum(x[0].size * x.dtype.itemsize for x in (*args, *whole))
    c = chunk_rows(b, row_bytes)

    def full(*xs):
        return core(*xs, *whole, jnp.arange(b, dtype=jnp.int32)) if whole else core(*xs)

    if c >= b:
        return full(*args)

    def chunked(*xs):
        xs = [x.reshape(b // c, c, *x.shape[1:]) for x in xs]
        if whole:
            rows = jnp.arange(b, dtype=jnp.int32).reshape(b // c, c)
            out = lax.map(lambda chunk: core(*chunk[1:], *whole, chunk[0]), [rows, *xs])
        else:
            out = lax.map(lambda chunk: core(*chunk), xs)
        return jax.tree.map(lambda y: y.reshape(b, *y.shape[2:]), out)

    return lax.platform_dependent(*args, cpu=chunked, default=full)
