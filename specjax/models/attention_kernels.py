"""Kernel-backed decode attention: the committed prefix by a decode kernel, the new tokens'
block densely, the two merged exactly.

The switch: ``specjax.models.attention.KERNEL``, one of :data:`KERNELS`: ``"xla"`` (the
default and the reference, :func:`~specjax.models.attention.attend_windows`), ``"pallas"`` or
``"cudnn"``. Set it with ``attention.set_kernel("pallas")`` (checked against the backend; it
returns the previous value), or for a whole process with the environment variable
``SPECJAX_ATTENTION_KERNEL=pallas``, so that a benchmark is A/B'd without a flag of its own. It
is read while a model call is traced, like ``attention.CHUNK``: clear the program cache
(``specjax.decode.seams.PROGRAMS.clear()``, ``jax.clear_caches()``) after changing it in a
process. ``scripts/check_attention_kernels.py`` compares and times the kernels on one device.

Every new token of a call sees the same committed prefix (the slots below ``lengths``) and,
among the T new tokens, what ``new_mask [B, T, T]`` allows (causal, or a draft tree's ancestor
mask). So a call splits into two parts, each with its own maximum, sum and un-normalised
weighted sum of values (:class:`Part`), merged by log-sum-exp (the online softmax's merge):

* **The prefix**, by a kernel, the T new tokens folded into the query rows of their key/value
  head (``[B, G, T * R, E]``: a decode kernel takes one block of queries per key/value head).

  - ``"pallas"``: JAX's split-K flash-decoding kernel (Pallas on Triton, the body of
    ``jax.experimental.pallas.ops.gpu.decode_attention.attn_forward_kernel``), called here over
    the stacked cache ``[N, B, S, G, E]`` in place: its grid is (query block, K split, row,
    key/value head) and each program reads one layer's ``[split, E]`` slice of one row and
    head, so the cache is not sliced, transposed or padded (JAX's ``gqa`` wrapper transposes it
    to ``[B, G, S, E]``: a copy per layer and call). Each split loops over the blocks of
    :data:`BLOCK_K` slots that hold the row's prefix, so a call costs the live length, not the
    capacity; it reads stale slots up to the end of the last block (masked; a cache's stale
    slots are old entries or zeros, finite). The last ``S mod BLOCK_K`` slots go to the dense
    part instead: the kernel's loads are not masked, and a block past the capacity would read
    past the buffer. Off a GPU it runs in Pallas' interpret mode (the CPU tests; slow).
  - ``"cudnn"``: cuDNN's fused attention, ``jax.nn.dot_product_attention(...,
    implementation="cudnn", key_value_seq_lengths=lengths, return_residual=True)``, over the
    static window of the first X slots that holds the longest row
    (:func:`specjax.models.attention_windows.windows`, chosen on device). Its output is
    normalised and its residual is the log-sum-exp: a part with maximum ``lse`` and sum 1. A
    GPU and bf16 or fp16 only; anything else is refused with one error, not a silent fall back
    (which would turn an A/B into XLA against XLA). The window is sliced out of the stacked
    cache, a copy of the live window per layer and call, until the cache is kept per layer.
    cuDNN returns the log-sum-exp in the compute dtype: bf16's rounding (~0.4%) weighs the
    prefix against the new tokens.

* **The new tokens** (and the ``"pallas"`` path's last ``S mod BLOCK_K`` slots), dense in XLA:
  ``[B, G, R, T, tail + T]`` scores, with the products of the XLA path.

Statically, per layer and call, these take the XLA path instead (one log line per reason, at
INFO): a ``kv_mask`` (a tree grown over several calls sees its ancestors among slots past the
committed prefix: not a prefix and a block), more than :data:`MAX_NEW` new tokens (a prefill),
``softcap`` (Gemma 2: neither kernel soft-caps), a sliding ``window`` with T > 1 (the new
tokens' positions differ and the kernel takes one start per row; with T = 1 ``"pallas"``
starts each row at its window, ``"cudnn"`` falls back), a cache whose dtype is not the compute
dtype, and for ``"pallas"`` a head size that is not a power of two (Triton's loads).
``"pallas"`` on a TPU is refused (its kernel, ragged paged attention, is not wired).

In fp32 on a CPU (interpret mode; ``cudnn``'s merge through the XLA implementation of the
same call) the output equals ``attend_windows``' within 5e-7 and a tiny model's logits within
2.4e-6, the same greedy tokens (tests/test_attention_kernels.py): the merges reorder the
softmax's sums. On a GPU, Triton's dots of fp32 inputs may run in TF32 (the precision is left
to JAX's default), so fp32 needs a looser comparison there; bf16 is the GPU case, and there the
kernel keeps its partial outputs in fp32. Not tried under a mesh: XLA's sharding does not
split a ``pallas_call``, so with the heads sharded keep ``"xla"`` (or wrap it in ``shard_map``).
"""

from __future__ import annotations

import functools
import logging
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from specjax.models import attention_windows
from specjax.typing import Array

KERNELS = ("xla", "pallas", "cudnn")
"""The values of :data:`specjax.models.attention.KERNEL`."""

BLOCK_K = 64
"""Slots per inner block of the Pallas kernel (a power of two, >= 16): each K split loops over
the blocks below a row's length; the last ``S mod BLOCK_K`` slots of the cache are attended
densely."""

K_SPLITS = 16
"""About how many splits of the capacity the Pallas kernel runs in parallel per row and head
(each split a power-of-two multiple of the block)."""

BLOCK_H = 16
"""Query rows per Pallas program (Triton's dot needs >= 16; T * R rows per key/value head)."""

MAX_NEW = 64
"""Calls of more new tokens than this (a prefill) take the XLA path: a decode kernel is for
decode steps and verification, and a prefill's T x T block is most of its work."""

_LOW = float(jnp.finfo(jnp.float32).min)
_log = logging.getLogger(__name__)
_told: set[tuple[str, str]] = set()


class Part(NamedTuple):
    """Softmax partials over a set of slots, P sets stacked first.

    Attributes:
      acc: fp32 ``[P, B, T, G, R, E]`` the probability-weighted sum of values, un-normalised.
      top: fp32 ``[P, B, T, G, R]`` the maximum score (the float32 minimum over no slot).
      total: fp32 ``[P, B, T, G, R]`` the sum of ``exp(score - top)``.
    """

    acc: Array
    top: Array
    total: Array


def check(kernel: str) -> None:
    """Raises one clear error for a kernel this backend cannot run (an unknown name; ``"cudnn"``
    off a GPU; ``"pallas"`` on a TPU, whose kernel, ragged paged attention, is not wired)."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown attention kernel {kernel!r}; choose one of {KERNELS}")
    backend = jax.default_backend()
    if kernel == "cudnn" and backend != "gpu":
        raise ValueError(
            f"attention kernel 'cudnn' needs a GPU (cuDNN); this backend is {backend!r}: use "
            "'pallas' (interpret mode off a GPU) or 'xla'"
        )
    if kernel == "pallas" and backend == "tpu":
        raise ValueError(
            "attention kernel 'pallas' is Pallas on Triton (GPU); the TPU's kernel (ragged "
            "paged attention) is not wired: use 'xla'"
        )


def fallback(
    kernel: str,
    q: Array,
    cache_k: Array,
    dtype,
    kv_mask=None,
    window: int | None = None,
    softcap: float | None = None,
) -> str | None:
    """Why this call goes to the XLA path instead of ``kernel`` (static), or None. Raises for a
    kernel the backend cannot run (:func:`check`) or, for ``"cudnn"``, a dtype it cannot."""
    check(kernel)
    if kernel == "xla":
        return "the XLA path"
    if kernel == "cudnn" and jnp.dtype(dtype) not in (jnp.bfloat16, jnp.float16):
        raise ValueError(
            f"attention kernel 'cudnn' takes bf16 or fp16; this model computes in "
            f"{jnp.dtype(dtype).name}: use 'pallas' or 'xla'"
        )
    reason = None
    if q.shape[1] > MAX_NEW:
        reason = f"more than {MAX_NEW} new tokens (a prefill)"
    elif kv_mask is not None:
        reason = "a kv_mask (a tree grown over several calls)"
    elif softcap is not None:
        reason = "soft-capped scores"
    elif window is not None and (kernel == "cudnn" or q.shape[1] > 1):
        reason = "a sliding window" + ("" if kernel == "cudnn" else " with T > 1")
    elif cache_k.dtype != jnp.dtype(dtype):
        reason = f"a {cache_k.dtype} cache with {jnp.dtype(dtype).name} compute"
    elif kernel == "pallas" and q.shape[-1] & (q.shape[-1] - 1):
        reason = f"head size {q.shape[-1]}, not a power of two"
    if reason is not None and (kernel, reason) not in _told:
        _told.add((kernel, reason))
        _log.info("attention kernel %r: %s goes to the XLA path", kernel, reason)
    return reason


def attend_kernel(
    q: Array,  # [B, T, G, R, E]
    cache_k: Array,  # [N, B, S, G, E]
    cache_v: Array,  # [N, B, S, G, E]
    layer: int,
    lengths: Array,  # [B]
    new_mask: Array,  # [B, T, T] bool
    *,
    kernel: str,
    scale: float,
    dtype,
    smallest: int | None = None,
    positions: Array | None = None,
    window: int | None = None,
    sdpa: str = "cudnn",
) -> Array:
    """:func:`specjax.models.attention.attend` (no ``kv_mask``, no ``softcap``) with the
    committed prefix attended by ``kernel`` (``"pallas"`` or ``"cudnn"``) and the new tokens
    densely, merged exactly (module docstring). ``sdpa``: the ``implementation`` of
    ``jax.nn.dot_product_attention`` for ``"cudnn"`` (tests pass ``"xla"`` to run the same
    merge on a CPU). Returns ``[B, T, G, R, E]`` in ``dtype``."""
    b, t = q.shape[:2]
    s = cache_k.shape[2]
    lengths = lengths.astype(jnp.int32)
    if window is None:
        start = jnp.zeros_like(lengths)
    else:  # T = 1: a committed slot s is at distance positions - s, seen below the window
        start = jnp.maximum(positions[:, 0].astype(jnp.int32) - window + 1, 0)
    if kernel == "pallas":
        block = pallas_block(s)
        covered = s // block * block if block else 0
        parts = []
        if covered:
            interpret = jax.default_backend() != "gpu"
            kv_len = jnp.minimum(lengths, covered)
            parts.append(
                prefix_pallas(q, cache_k, cache_v, layer, kv_len, start, scale, block, interpret)
            )
    elif kernel == "cudnn":
        covered = s
        parts = [prefix_sdpa(q, cache_k, cache_v, layer, lengths, scale, smallest, sdpa)]
    else:
        raise ValueError(f"attend_kernel runs 'pallas' or 'cudnn', not {kernel!r}")
    # The dense part: the slots past the kernel's (committed or stale), then the T new ones.
    rows = jnp.arange(b)[:, None]
    new = lengths[:, None] + jnp.arange(t)[None, :]  # [B, T] the new tokens' slots
    keys, values = cache_k[layer, rows, new], cache_v[layer, rows, new]  # [B, T, G, E]
    mask = new_mask
    if covered < s:
        slots = jnp.arange(covered, s)[None, :]  # [1, tail]
        seen = (slots < lengths[:, None]) & (slots >= start[:, None])  # [B, tail]
        tail = jnp.broadcast_to(seen[:, None, :], (b, t, s - covered))
        keys = jnp.concatenate([cache_k[layer, :, covered:], keys], axis=1)
        values = jnp.concatenate([cache_v[layer, :, covered:], values], axis=1)
        mask = jnp.concatenate([tail, new_mask], axis=2)
    parts.append(dense_part(q, keys, values, mask, scale, dtype))
    return merge(parts).astype(dtype)


def pallas_block(capacity: int) -> int:
    """The Pallas kernel's block of slots for a cache of ``capacity``: :data:`BLOCK_K`, or the
    largest power of two >= 16 that fits; 0 below 16 slots (all of it dense)."""
    if capacity < 16:
        return 0
    return min(BLOCK_K, 1 << (capacity.bit_length() - 1))


def prefix_pallas(
    q: Array,  # [B, T, G, R, E]
    cache_k: Array,  # [N, B, S, G, E]
    cache_v: Array,
    layer: int,
    kv_len: Array,  # [B] slots below it (and at or past start) are attended
    start: Array,  # [B]
    scale: float,
    block: int,
    interpret: bool,
    *,
    splits: int = K_SPLITS,
    block_h: int = BLOCK_H,
    num_warps: int = 4,
    num_stages: int = 2,
) -> Part:
    """The slots ``start .. kv_len - 1`` of every row by JAX's split-K decode kernel over the
    stacked cache in place; ``kv_len`` must be at most ``S`` rounded down to ``block``. One
    part per K split (merged with the rest by :func:`merge`)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu
    from jax.experimental.pallas.ops.gpu.decode_attention import attn_forward_kernel

    b, t, g, r, e = q.shape
    s = cache_k.shape[2]
    heads = t * r  # the query rows of one key/value head: row t * R + r
    blocks = s // block
    split = block * pl.next_power_of_2(pl.cdiv(blocks, splits))
    num_splits = pl.cdiv(blocks * block, split)
    head_splits = pl.cdiv(heads, block_h)
    queries = jnp.transpose(q, (0, 2, 1, 3, 4)).reshape(b, g, heads, e)
    kernel = functools.partial(
        attn_forward_kernel, sm_scale=scale, block_k=block, block_h=block_h, num_heads=heads
    )
    cache_spec = pl.BlockSpec((None, None, split, None, e), lambda i, j, x, y: (layer, x, j, y, 0))
    row_spec = pl.BlockSpec((None,), lambda i, j, x, y: (x,))
    o, total, top = pl.pallas_call(
        kernel,
        grid=(head_splits, num_splits, b, g),  # program ids 0, 1 as the kernel reads them
        in_specs=[
            pl.BlockSpec((None, None, block_h, e), lambda i, j, x, y: (x, y, i, 0)),
            cache_spec,
            cache_spec,
            row_spec,
            row_spec,
        ],
        out_specs=[
            pl.BlockSpec((None, None, None, block_h, e), lambda i, j, x, y: (j, x, y, i, 0)),
            pl.BlockSpec((None, None, None, block_h), lambda i, j, x, y: (j, x, y, i)),
            pl.BlockSpec((None, None, None, block_h), lambda i, j, x, y: (j, x, y, i)),
        ],
        out_shape=[
            jax.ShapeDtypeStruct((num_splits, b, g, heads, e), jnp.float32),  # fp32 partials
            jax.ShapeDtypeStruct((num_splits, b, g, heads), jnp.float32),
            jax.ShapeDtypeStruct((num_splits, b, g, heads), jnp.float32),
        ],
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        interpret=interpret,
        name="specjax_decode_prefix",
    )(queries, cache_k, cache_v, start.astype(jnp.int32), kv_len.astype(jnp.int32))

    def rows(x):  # [P, B, G, T * R, ...] -> [P, B, T, G, R, ...]
        x = x.reshape(num_splits, b, g, t, r, *x.shape[4:])
        return jnp.moveaxis(x, 3, 2)

    return Part(rows(o), rows(top), rows(total))


def prefix_sdpa(
    q: Array,  # [B, T, G, R, E]
    cache_k: Array,  # [N, B, S, G, E]
    cache_v: Array,
    layer: int,
    lengths: Array,  # [B]
    scale: float,
    smallest: int | None,
    implementation: str,
) -> Part:
    """The committed slots by ``jax.nn.dot_product_attention`` (cuDNN on a GPU) over the
    smallest window that holds the longest row; its output is normalised and its residual the
    log-sum-exp: one part with maximum ``lse`` and sum 1 (none for a row of length 0)."""
    b, t, g, r, e = q.shape
    query = q.reshape(b, t, g * r, e)  # head g * R + r: the function's grouping

    def over(w: int):
        def run(query, cache_k, cache_v, lengths):
            k, v = cache_k[layer, :, :w], cache_v[layer, :, :w]  # [B, X, G, E]
            return jax.nn.dot_product_attention(
                query,
                k,
                v,
                scale=scale,
                key_value_seq_lengths=lengths,
                implementation=implementation,
                return_residual=True,
            )

        return run

    sizes = attention_windows.windows(cache_k.shape[2], smallest)
    args = (query, cache_k, cache_v, lengths)
    # the window that holds the committed prefix (no new tokens: t = 0)
    index = attention_windows.window_index(lengths, 0, cache_k.shape[2], smallest)
    if index is None:
        out, lse = over(sizes[0])(*args)
    else:
        out, lse = lax.switch(index, [over(w) for w in sizes], *args)
    some = (lengths > 0)[:, None, None, None]  # [B, 1, 1, 1]: an empty row's output is junk
    out = out.reshape(b, t, g, r, e).astype(jnp.float32)
    lse = lse.reshape(b, t, g, r).astype(jnp.float32)
    return Part(
        jnp.where(some[..., None], out, 0.0)[None],
        jnp.where(some, lse, _LOW)[None],
        jnp.where(some, 1.0, 0.0)[None] * jnp.ones_like(lse),
    )


def dense_part(q: Array, keys: Array, values: Array, mask: Array, scale: float, dtype) -> Part:
    """The slots ``keys``/``values [B, X, G, E]`` that ``mask [B, T, X]`` allows, in XLA with
    the products of :func:`~specjax.models.attention.attend_windows` (scores of the compute
    dtype in fp32, probabilities cast to it against the values)."""
    scores = attention_windows.scores_of(q, keys, scale, None, dtype)  # [B, G, R, T, X]
    allowed = mask[:, None, None]
    top = jnp.max(jnp.where(allowed, scores, _LOW), axis=-1)  # [B, G, R, T]
    probs = jnp.where(allowed, jnp.exp(scores - top[..., None]), 0.0)
    total = jnp.sum(probs, axis=-1)
    acc = jnp.einsum("bgrtx,bxge->btgre", probs.astype(dtype), values.astype(dtype))

    def rows(x):  # [B, G, R, T] -> [1, B, T, G, R]
        return jnp.transpose(x, (0, 3, 1, 2))[None]

    return Part(acc.astype(jnp.float32)[None], rows(top), rows(total))


def merge(parts: list[Part]) -> Array:
    """fp32 ``[B, T, G, R, E]``: the softmax over every part's slots, by log-sum-exp: each
    part's sums rescaled by ``exp(top - max top)``. A query that sees no slot gets zeros."""
    top = jnp.concatenate([p.top for p in parts])  # [P, B, T, G, R]
    total = jnp.concatenate([p.total for p in parts])
    acc = jnp.concatenate([p.acc for p in parts])
    # A barrier as JAX's own split-K merge has (b/389925439: NaNs after jit on GPU otherwise).
    peak = lax.optimization_barrier(jnp.max(top, axis=0))
    fade = jnp.exp(top - peak)  # 0 for a part that saw nothing (top the float32 minimum)
    total = jnp.sum(total * fade, axis=0)
    acc = jnp.sum(acc * fade[..., None], axis=0)
    return acc / jnp.where(total > 0, total, 1.0)[..., None]
