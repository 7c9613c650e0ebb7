"""Attention that costs what the cache holds, not its capacity.

A call scores T new tokens of every row; their keys and values are already written at slots
``lengths .. lengths + T - 1`` of the cache. Only slots below ``max(lengths) + T`` can be
attended to, so a call reads only those, rounded up, and a run compiled for a long
``max_new_tokens`` or a large prompt bucket no longer pays for the empty end of its cache. Two
ways, one compiled program for every length, nothing ``[B, T, S]`` built:

* **windows** (:func:`attend_windows`, the default): one softmax over a static window of the
  first X slots, X the smallest of a few sizes (powers of two from ``MIN_WINDOW`` up to S, of
  :mod:`specjax.models.attention_windows`) that holds the longest row, chosen on device by
  ``lax.switch``: the live length rounded up to a power of two, and inside the window the dense
  attention's arithmetic, so the logits are the dense form's (bit for bit under ``jit`` on
  SmolLM2). The window's index is a sum of comparisons (:func:`window_index`), computed once per
  forward by the decoder: no loop (a ``jnp.searchsorted`` lowers to one, which on GPU splits the
  step's CUDA graph in every layer).
* **chunks** (:func:`attend_chunks`, with :data:`CHUNK` > 0 slots per chunk): a loop over
  the first ``ceil((max(lengths) + T) / CHUNK)`` chunks of the cache (a trip count known only on
  device), each chunk's scores merged into a running maximum, sum and weighted sum of values
  (the online softmax of flash attention). A step costs the live length rounded up to a chunk,
  and XLA's ``cost_analysis()`` bytes of an autoregressive decode program are the same at every
  capacity (the windows' count every branch of the switch).

Both equal the dense ``[B, T, S]`` attention (one mask over every slot, one softmax) within 1e-6
on random inputs and 1e-5 on a random model's logits, with the same greedy tokens
(tests/test_attention.py). ``scripts/bench_attention.py`` measured them side by side on this
project's CPU (BENCHMARKS.md): equally fast and both flat in S. The windows stay the default
because they keep the dense arithmetic: on SmolLM2's 30 layers the chunks' other order of sums
moves the logits by up to 6e-5 (fp32), the windows' by nothing.

A decode kernel can take the committed prefix instead (:data:`KERNEL`: ``"pallas"`` or
``"cudnn"``, :mod:`specjax.models.attention_kernels`), the new tokens' block merged exactly;
the windows above stay the default and its reference.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
from jax import lax

from specjax.models import attention_kernels as kernels
from specjax.models.attention_windows import scores_of, window_index, windows
from specjax.typing import Array

CHUNK = 0
"""0: :func:`attend_windows` (the default); a positive value: :func:`attend_chunks` with this
many slots per chunk."""

KERNEL = os.environ.get("SPECJAX_ATTENTION_KERNEL", "xla")
"""Which computes the committed prefix: ``"xla"`` (the default and the reference: the windows
or the chunks above), ``"pallas"`` (JAX's split-K Pallas decode kernel; interpret mode off a
GPU) or ``"cudnn"`` (cuDNN's fused attention, GPU and bf16/fp16 only), the new tokens' block
merged exactly (:mod:`specjax.models.attention_kernels`, which says which layers fall back to
XLA). Set it with :func:`set_kernel`, or for a whole process (an A/B of any script) with the
environment variable ``SPECJAX_ATTENTION_KERNEL``; checked when a model call is traced. A
module constant read while tracing, like :data:`CHUNK`: clear the program cache after changing
it."""


def set_kernel(name: str) -> str:
    """Sets :data:`KERNEL` to ``name`` (``"xla"``, ``"pallas"`` or ``"cudnn"``) after checking
    this backend can run it (one clear error if not); returns the previous value."""
    kernels.check(name)
    global KERNEL
    previous, KERNEL = KERNEL, name
    return previous


def allowed_slots(lengths: Array, new_mask: Array, width: int, start: Array | int = 0) -> Array:
    """``[B, T, X]``: the committed slots (``< lengths``) plus the new tokens' slots that
    ``new_mask [B, T, T]`` allows, over the ``width`` slots from ``start``."""
    t = new_mask.shape[-1]
    s = start + jnp.arange(width)[None, :]  # [1, X]
    rel = s - lengths[:, None]  # [B, X] index among the new tokens
    in_new = (rel >= 0) & (rel < t)
    idx = jnp.broadcast_to(jnp.clip(rel, 0, t - 1)[:, None, :], (*new_mask.shape[:2], width))
    among_new = jnp.take_along_axis(new_mask, idx, axis=2) & in_new[:, None, :]
    return (s < lengths[:, None])[:, None, :] | among_new


def slot_distances(lengths: Array, positions: Array, width: int, start: Array | int = 0) -> Array:
    """int ``[B, T, X]``: how many positions each new token (at ``positions [B, T]``) lies after
    each of the ``width`` slots from ``start``. A committed slot holds the position of its index
    (every prefix is laid out from slot 0); a new token's slot, the position it was given."""
    t = positions.shape[1]
    s = start + jnp.arange(width)[None, :]  # [1, X]
    rel = s - lengths[:, None]  # [B, X]
    new_pos = jnp.take_along_axis(positions, jnp.clip(rel, 0, t - 1), axis=1)  # [B, X]
    key_pos = jnp.where((rel >= 0) & (rel < t), new_pos, s)  # [B, X]
    return positions[:, :, None] - key_pos[:, None, :]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class HiddenFirstSlot:
    """A slot rule (the ``kv_mask`` protocol of :func:`attend`): ``inner``'s (or, without one,
    the committed slots and what ``new_mask`` allows), with slot 0 hidden from every query but
    one in slot 0 itself. An imported draft head's first pair (the first token, its feature
    zero) exists only in specjax's layout: vLLM's drafts start at the second token.

    Attributes:
      lengths: int ``[B]`` committed entries before the call.
      new_mask: bool ``[B, T, T]`` among the new tokens (unused with ``inner``).
      inner: a :class:`specjax.tree.LevelMask` or None.
    """

    lengths: Array
    new_mask: Array
    inner: object = None

    def allowed(self, start: Array | int, size: int) -> Array:
        """bool ``[B, T, size]`` over the ``size`` slots from ``start``."""
        if self.inner is None:
            base = allowed_slots(self.lengths, self.new_mask, size, start)
            t = self.new_mask.shape[-1]
            query = self.lengths[:, None] + jnp.arange(t)[None, :]  # [B, T] the queries' slots
        else:  # a tree grown level by level: its nodes never sit in slot 0
            base = self.inner.allowed(start, size)
            query = jnp.ones(base.shape[:2], jnp.int32)
        slot = start + jnp.arange(size)[None, None, :]
        return base & ~((slot == 0) & (query[..., None] != 0))


def visible_slots(
    lengths: Array,
    new_mask: Array,
    kv_mask,
    width: int,
    start: Array | int = 0,
    *,
    positions: Array | None = None,
    window: int | None = None,
) -> Array:
    """bool ``[B, T, X]``: the slots each new token attends to among the ``width`` from
    ``start``: what ``kv_mask`` (else ``new_mask``) allows, and with a sliding ``window`` only
    those fewer than ``window`` positions before the token's own (``positions [B, T]``)."""
    if kv_mask is None:
        allowed = allowed_slots(lengths, new_mask, width, start)
    else:
        allowed = kv_mask.allowed(start, width)
    if window is None:
        return allowed
    if kv_mask is None:
        dist = slot_distances(lengths, positions, width, start)
    else:
        dist = kv_mask.distances(positions, start, width)
    return allowed & (dist < window)


def attend(
    q: Array,  # [B, T, G, R, E]
    cache_k: Array,  # [N, B, S, G, E] the stacked cache of every layer, the T new keys written
    cache_v: Array,  # [N, B, S, G, E]
    layer: int,
    lengths: Array,  # [B] committed entries before this call
    new_mask: Array,  # [B, T, T] bool
    kv_mask=None,  # a specjax.tree.LevelMask, replaces the mask built from new_mask
    *,
    scale: float,
    dtype,
    smallest: int | None = None,
    positions: Array | None = None,
    window: int | None = None,
    softcap: float | None = None,
    index: Array | None = None,
) -> Array:
    """Attention of T new tokens over the live part of layer ``layer``'s cache (module
    docstring): :func:`attend_chunks`, or :func:`attend_windows` when :data:`CHUNK` is 0; with
    :data:`KERNEL` set, the prefix by a kernel where the layer allows
    (:mod:`specjax.models.attention_kernels`). The whole stacked cache goes in and only the
    live part of the layer's is read.

    Args:
      q: queries (rotary embedding applied), grouped as ``[B, T, G, R, E]``.
      cache_k: every layer's keys, this call's written at ``lengths .. lengths + T - 1``.
      cache_v: every layer's values, likewise.
      layer: the layer (static).
      lengths: int ``[B]`` committed entries per row before this call.
      new_mask: ``new_mask[b, i, j]``: new token i attends to new token j.
      kv_mask: optional :class:`specjax.tree.LevelMask` (its w columns: the T new tokens), used
        instead of ``new_mask``: a draft tree grown over several calls sees only its ancestors among
        earlier nodes. It is a rule, asked only for the slots read (``allowed(start, size)``
        ``[B, T, size]``); it must allow no slot past ``lengths + T``.
      scale: the score scale (``head_dim ** -0.5``).
      dtype: the compute dtype of the products with keys and values.
      smallest: :func:`attend_windows`' smallest window (default
        :data:`~specjax.models.attention_windows.MIN_WINDOW`).
      positions: int ``[B, T]`` the new tokens' positions; needed with ``window``.
      window: a sliding layer's W: a token sees only keys fewer than W positions before its
        own (counted from its own position, so a draft tree's deeper nodes see less of the
        prefix), or None.
      softcap: scores become ``softcap * tanh(score / softcap)`` before the mask, or None.
      index: the windows' :func:`window_index` for these ``lengths`` and T, computed once per
        forward by a caller with many layers; None: computed here. (Unused by the chunks.)

    Returns:
      ``[B, T, G, R, E]`` in ``dtype``.
    """
    if window is not None and positions is None:
        raise ValueError("a sliding window needs the new tokens' positions")
    args = (q, cache_k, cache_v, layer, lengths, new_mask, kv_mask)
    rule = dict(positions=positions, window=window, softcap=softcap)
    if KERNEL != "xla":
        why = kernels.fallback(KERNEL, q, cache_k, dtype, kv_mask, window, softcap)
        if why is None:  # else the XLA path below
            kw = dict(scale=scale, dtype=dtype, smallest=smallest, positions=positions)
            return kernels.attend_kernel(*args[:-1], kernel=KERNEL, window=window, **kw)
    if CHUNK:
        return attend_chunks(*args, scale=scale, dtype=dtype, **rule)
    return attend_windows(*args, scale=scale, dtype=dtype, smallest=smallest, index=index, **rule)


def attend_windows(
    q: Array,  # [B, T, G, R, E]
    cache_k: Array,  # [N, B, S, G, E]
    cache_v: Array,  # [N, B, S, G, E]
    layer: int,
    lengths: Array,  # [B]
    new_mask: Array,  # [B, T, T] bool
    kv_mask=None,  # a specjax.tree.LevelMask
    *,
    scale: float,
    dtype,
    smallest: int | None = None,
    positions: Array | None = None,
    window: int | None = None,
    softcap: float | None = None,
    index: Array | None = None,
) -> Array:
    """:func:`attend` over a static window of the first X slots, chosen on device from
    :func:`windows` (``smallest``: the smallest, default
    :data:`~specjax.models.attention_windows.MIN_WINDOW`) by ``index`` (:func:`window_index`;
    None: computed here). Each window reads its own slice of the stacked cache, so no layer's
    cache is an operand of the switch."""
    t = q.shape[1]

    def over(w: int):
        def run(q, cache_k, cache_v, lengths, new_mask, kv_mask, positions):
            rule = dict(positions=positions, window=window)
            allowed = visible_slots(lengths, new_mask, kv_mask, w, **rule)  # [B, T, X]
            k, v = cache_k[layer, :, :w], cache_v[layer, :, :w]  # [B, X, G, E]
            scores = scores_of(q, k, scale, softcap, dtype)
            scores = jnp.where(allowed[:, None, None], scores, jnp.finfo(jnp.float32).min)
            probs = jax.nn.softmax(scores, axis=-1).astype(dtype)  # [B, G, R, T, X]
            return jnp.einsum("bgrtx,bxge->btgre", probs, v.astype(dtype))

        return run

    sizes = windows(cache_k.shape[2], smallest)
    args = (q, cache_k, cache_v, lengths, new_mask, kv_mask, positions)
    if len(sizes) == 1:
        return over(sizes[0])(*args)
    if index is None:
        index = window_index(lengths, t, cache_k.shape[2], smallest)
    return lax.switch(index, [over(w) for w in sizes], *args)


def attend_chunks(
    q: Array,  # [B, T, G, R, E]
    cache_k: Array,  # [N, B, S, G, E]
    cache_v: Array,  # [N, B, S, G, E]
    layer: int,
    lengths: Array,  # [B]
    new_mask: Array,  # [B, T, T] bool
    kv_mask=None,  # a specjax.tree.LevelMask
    *,
    scale: float,
    dtype,
    chunk: int | None = None,
    positions: Array | None = None,
    window: int | None = None,
    softcap: float | None = None,
) -> Array:
    """:func:`attend` as a loop over chunks of ``chunk`` slots (default :data:`CHUNK`), only as
    many as the longest row needs, each merged into a running maximum, sum and weighted sum of
    values (the online softmax). A last chunk that would run past S starts earlier and skips
    the slots already counted."""
    chunk = CHUNK if chunk is None else chunk
    b, t, g, r, e = q.shape
    s = cache_k.shape[2]
    chunk = min(chunk, s)
    low = jnp.finfo(jnp.float32).min
    needed = jnp.max(lengths) + t  # the longest row after this call
    trips = (needed + chunk - 1) // chunk

    def body(i, carry):
        top, total, acc = carry  # [B, G, R, T], [B, G, R, T], [B, T, G, R, E] (float32)
        start = jnp.minimum(i * chunk, s - chunk)
        at, size = (layer, 0, start, 0, 0), (1, b, chunk, *cache_k.shape[3:])
        k = lax.dynamic_slice(cache_k, at, size)[0]  # [B, X, G, E]: only the chunk is read
        v = lax.dynamic_slice(cache_v, at, size)[0]
        rule = dict(positions=positions, window=window)
        allowed = visible_slots(lengths, new_mask, kv_mask, chunk, start, **rule)  # [B, T, X]
        slots = start + jnp.arange(chunk)  # [X]
        allowed = allowed & (slots >= i * chunk)[None, None, :]  # not counted twice
        scores = scores_of(q, k, scale, softcap, dtype)
        mask = allowed[:, None, None]  # [B, 1, 1, T, X]
        new_top = jnp.maximum(top, jnp.max(jnp.where(mask, scores, low), axis=-1))
        probs = jnp.where(mask, jnp.exp(scores - new_top[..., None]), 0.0)
        fade = jnp.exp(top - new_top)  # [B, G, R, T]
        total = total * fade + jnp.sum(probs, axis=-1)
        values = jnp.einsum("bgrtx,bxge->btgre", probs.astype(dtype), v.astype(dtype))
        acc = acc * jnp.moveaxis(fade, 3, 1)[..., None] + values.astype(jnp.float32)
        return new_top, total, acc

    top = jnp.full((b, g, r, t), low, jnp.float32)
    carry = (top, jnp.zeros_like(top), jnp.zeros((b, t, g, r, e), jnp.float32))
    _, total, acc = lax.fori_loop(0, trips, body, carry)
    return (acc / jnp.moveaxis(total, 3, 1)[..., None]).astype(dtype)
