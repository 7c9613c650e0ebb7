"""The static windows of a cache that attention reads, and the scores over one: the pieces the
XLA attention (:mod:`specjax.models.attention`) and the decode kernels
(:mod:`specjax.models.attention_kernels`) share.

A call reads the first X slots of a cache of S, X the smallest of a few static sizes (powers of
two from :data:`MIN_WINDOW` up to S) that holds the longest row after it.
"""

from __future__ import annotations

import jax.numpy as jnp

from specjax.typing import Array

MIN_WINDOW = 256
"""The smallest window: caches of at most this many slots use one window (no switch)."""


def windows(capacity: int, smallest: int | None = None) -> tuple[int, ...]:
    """The static windows for ``capacity`` slots: ``smallest`` (default :data:`MIN_WINDOW`),
    ``2 smallest, ...`` below the capacity, then the capacity itself (one window when
    ``capacity <= smallest``)."""
    out, w = [], MIN_WINDOW if smallest is None else smallest
    while w < capacity:
        out.append(w)
        w *= 2
    return (*out, capacity)


def window_index(lengths: Array, t: int, capacity: int, smallest: int | None = None):
    """int32 ``[]``: the index into :func:`windows` (``capacity``, ``smallest``: default
    :data:`MIN_WINDOW`) of the smallest window that holds the longest row after a call of ``t``
    new tokens (``lengths [B]`` before it), or None where there is one window. A sum of
    comparisons, the same number ``searchsorted(sizes[:-1], needed)`` gives, without its loop."""
    sizes = windows(capacity, smallest)
    if len(sizes) == 1:
        return None
    needed = jnp.max(lengths) + t  # the longest row after this call
    return jnp.sum(needed > jnp.asarray(sizes[:-1], jnp.int32)).astype(jnp.int32)


def scores_of(q: Array, k: Array, scale: float, softcap: float | None, dtype) -> Array:
    """fp32 scores ``[B, G, R, T, X]`` of ``q [B, T, G, R, E]`` against ``k [B, X, G, E]``:
    scaled, and soft-capped when ``softcap`` is set."""
    scores = jnp.einsum("btgre,bxge->bgrtx", q, k.astype(dtype)).astype(jnp.float32) * scale
    if softcap is not None:
        scores = softcap * jnp.tanh(scores / softcap)
    return scores
