"""Attention that costs what the cache holds, not its capacity.

A call scores T new tokens of every row; their keys and values are already written at slots
``lengths .. lengths + T - 1`` of the cache. Only slots below ``max(lengths) + T`` can be
attended to, so the scores are computed over a **window** of the first W slots, W the smallest
of a few static sizes (powers of two from :data:`MIN_WINDOW` up to the capacity S) that holds the
longest row after this call. The window is chosen on device (``lax.switch`` over the sizes), so
one compiled program serves every length, and a step costs the live length rounded up to a
power of two instead of S: a run compiled for a long ``max_new_tokens`` or a large prompt bucket
no longer pays for the empty end of its cache from the first step.

Inside the window the arithmetic is the dense attention's: scores, a ``[B, T, W]`` mask (the
committed slots, and among the new tokens the causal or tree mask), one softmax, one product
with the values. The slots past the window are masked in the dense form and add exact zeros
there, so the outputs equal the dense ``[B, T, S]`` attention up to the order of the sums
(within 1e-5 on the logits of random and SmolLM2 weights, tests/test_attention.py), and
nothing ``[B, T, S]`` is built.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from specjax.typing import Array

MIN_WINDOW = 256
"""The smallest window: caches of at most this many slots use one window (no switch)."""


def windows(capacity: int, smallest: int = MIN_WINDOW) -> tuple[int, ...]:
    """The static windows for ``capacity`` slots: ``smallest, 2 smallest, ...`` below the
    capacity, then the capacity itself (one window when ``capacity <= smallest``)."""
    out, w = [], smallest
    while w < capacity:
        out.append(w)
        w *= 2
    return (*out, capacity)


def allowed_slots(lengths: Array, new_mask: Array, width: int) -> Array:
    """``[B, T, W]``: the committed slots (``< lengths``) plus the new tokens' slots that
    ``new_mask [B, T, T]`` allows, over the first ``width`` slots."""
    t = new_mask.shape[-1]
    s = jnp.arange(width)[None, :]  # [1, W]
    rel = s - lengths[:, None]  # [B, W] index among the new tokens
    in_new = (rel >= 0) & (rel < t)
    idx = jnp.broadcast_to(jnp.clip(rel, 0, t - 1)[:, None, :], (*new_mask.shape[:2], width))
    among_new = jnp.take_along_axis(new_mask, idx, axis=2) & in_new[:, None, :]
    return (s < lengths[:, None])[:, None, :] | among_new


def attend(
    q: Array,  # [B, T, G, R, E]
    cache_k: Array,  # [N, B, S, G, E] the stacked cache of every layer, the T new keys written
    cache_v: Array,  # [N, B, S, G, E]
    layer: int,
    lengths: Array,  # [B] committed entries before this call
    new_mask: Array,  # [B, T, T] bool
    kv_mask: Array | None = None,  # [B, T, S] bool, replaces the mask built from new_mask
    *,
    scale: float,
    dtype,
    smallest: int | None = None,
) -> Array:
    """Attention of T new tokens over the live window of layer ``layer``'s cache (module
    docstring). The whole stacked cache goes in and each window reads its own slice, so no
    layer's cache is materialised as an operand of the switch.

    Args:
      q: queries (rotary embedding applied), grouped as ``[B, T, G, R, E]``.
      cache_k: every layer's keys, this call's written at ``lengths .. lengths + T - 1``.
      cache_v: every layer's values, likewise.
      layer: the layer (static).
      lengths: int ``[B]`` committed entries per row before this call.
      new_mask: ``new_mask[b, i, j]``: new token i attends to new token j.
      kv_mask: optional ``[B, T, S]`` mask of every slot, used as given (a draft tree grown
        over several calls sees only its ancestors among earlier nodes); its slots past
        ``lengths + T`` must be False.
      scale: the score scale (``head_dim ** -0.5``).
      dtype: the compute dtype of the products with keys and values.
      smallest: the smallest window (default :data:`MIN_WINDOW`; see :func:`windows`).

    Returns:
      ``[B, T, G, R, E]`` in ``dtype``.
    """
    t = q.shape[1]

    def window(w: int):
        def run(q, cache_k, cache_v, lengths, new_mask, kv_mask):
            if kv_mask is None:
                allowed = allowed_slots(lengths, new_mask, w)  # [B, T, W]
            else:
                allowed = kv_mask[:, :, :w]
            k, v = cache_k[layer, :, :w], cache_v[layer, :, :w]  # [B, W, G, E]
            scores = jnp.einsum("btgre,bsge->bgrts", q, k.astype(dtype))
            scores = scores.astype(jnp.float32) * scale
            scores = jnp.where(allowed[:, None, None], scores, jnp.finfo(jnp.float32).min)
            probs = jax.nn.softmax(scores, axis=-1).astype(dtype)  # [B, G, R, T, W]
            return jnp.einsum("bgrts,bsge->btgre", probs, v.astype(dtype))

        return run

    sizes = windows(cache_k.shape[2], MIN_WINDOW if smallest is None else smallest)
    args = (q, cache_k, cache_v, lengths, new_mask, kv_mask)
    if len(sizes) == 1:
        return window(sizes[0])(*args)
    needed = jnp.max(lengths) + t  # the longest row after this call
    index = jnp.searchsorted(jnp.asarray(sizes[:-1], jnp.int32), needed, side="left")
    return lax.switch(index, [window(w) for w in sizes], *args)
