"""The explicit KV cache: a pytree passed into every model call and returned, never module state.

Layout: ``k`` and ``v`` are ``[N, B, S, G, E]`` (S = capacity); ``lengths [B]`` counts the
committed entries of each row. A model call with T new tokens writes their keys and values at
slots ``lengths .. lengths + T - 1`` of each row and returns the cache with ``lengths + T``.
Speculative decoding then keeps only the accepted entries: :meth:`KVCache.rollback` shortens
rows, :meth:`KVCache.compact` moves the accepted path's entries (scattered over a draft tree) into
contiguous slots. Every model writes its new entries with :func:`write_slots`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax

from specjax.models.config import ModelConfig
from specjax.typing import Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
    """Keys, values and per-row lengths of every layer.

    Attributes:
      k: ``[N, B, S, G, E]`` keys (rotary embedding already applied).
      v: ``[N, B, S, G, E]`` values.
      lengths: int32 ``[B]`` committed entries per row; slots at or past it are stale.
    """

    k: Array
    v: Array
    lengths: Array

    @classmethod
    def init(
        cls, config: ModelConfig, batch: int, capacity: int | None = None, dtype=None
    ) -> KVCache:
        """An empty cache for ``batch`` rows of ``capacity`` slots (default config.max_seq_len)."""
        capacity = config.max_seq_len if capacity is None else capacity
        if capacity < 1 or batch < 1:
            raise ValueError(f"cache needs batch >= 1 and capacity >= 1, got {batch}, {capacity}")
        shape = (config.num_layers, batch, capacity, config.num_kv_heads, config.head_dim)
        dtype = config.compute_dtype if dtype is None else dtype
        return cls(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype), jnp.zeros((batch,), jnp.int32))

    @property
    def capacity(self) -> int:
        """S, the number of slots per row."""
        return self.k.shape[2]

    @property
    def batch(self) -> int:
        """B."""
        return self.k.shape[1]

    def rollback(self, lengths: Array) -> KVCache:
        """Keeps the first ``lengths [B]`` entries of each row (the rest become stale)."""
        return dataclasses.replace(self, lengths=jnp.asarray(lengths, jnp.int32))

    def compact(self, base: Array, sources: Array, count: Array) -> KVCache:
        """Moves entries ``sources[b, i]`` to slots ``base[b] + i`` for ``i < count[b]``.

        Used after verifying a draft tree: the accepted path's nodes sit at scattered slots
        (``base + node index``) and must become a contiguous continuation of the prefix.

        Args:
          base: int ``[B]`` first destination slot (the committed length before the tree).
          sources: int ``[B, M]`` source slots, in the order they are to be laid out.
          count: int ``[B]`` how many of the M sources to keep (``<= M``).

        Returns:
          The cache with the entries moved and ``lengths = base + count``.
        """
        m = sources.shape[1]
        src = jnp.clip(sources, 0, self.capacity - 1)
        keep = jnp.arange(m)[None, :] < count[:, None]  # [B, M]

        def move(x):  # [N, B, S, G, E]
            picked = read_slots(x, src)  # [B, N, M, G, E], read before any write
            return write_slots(x, None, base, picked, keep)

        return KVCache(move(self.k), move(self.v), (base + count).astype(jnp.int32))


UNROLL_ROWS = 0
"""0 (the default): a multi-slot write into the cache is one scatter, a read of scattered slots
one gather. A batch of at most ``UNROLL_ROWS`` rows instead writes each row's block with one
``dynamic_update_slice`` and reads each slot with one dynamic slice.

Both run in place at the same speed on this project's CPU (BENCHMARKS.md, "Attention over the
live window"), but XLA's ``cost_analysis()`` prices a scatter into or gather from the stacked
cache as reading all of it, so a multi-token step's bytes grow with the capacity; row by row
they follow the live window. Rows cost compile time: a SmolLM2 tree program compiled in ~9 s
one way and ~11 s (B = 1) or ~24 s (B = 4) row by row. A module constant read while tracing,
like :data:`specjax.models.attention.CHUNK`: clear the program cache after changing it."""


def _per_row(batch: int, slots: int, capacity: int) -> bool:
    return 1 < slots <= capacity and batch <= UNROLL_ROWS


def read_slots(x: Array, slots: Array) -> Array:
    """``[B, N, M, G, E]``: slots ``slots [B, M]`` (in range) of every layer of ``x [N, B, S, G,
    E]``: one gather, or (:data:`UNROLL_ROWS`) one dynamic slice per slot."""
    b, m = slots.shape
    if not _per_row(b, m, x.shape[2]):
        return jnp.moveaxis(x[:, jnp.arange(b)[:, None], slots], 0, 1)
    size = (x.shape[0], 1, 1, *x.shape[3:])
    picked = [
        [lax.dynamic_slice(x, (0, r, slots[r, i], 0, 0), size)[:, 0, 0] for i in range(m)]
        for r in range(b)
    ]
    return jnp.stack([jnp.stack(row, axis=1) for row in picked])


def write_slots(
    x: Array,  # [N, B, S, G, E]
    layer: int | None,
    starts: Array,  # [B]
    values: Array,  # [B, T, G, E], or [B, N, T, G, E] when layer is None
    valid: Array | None = None,  # [B, T] bool
) -> Array:
    """``x`` with ``values[b, t]`` at slot ``starts[b] + t`` of row b, in layer ``layer`` (or
    every layer: ``None``); slots at or past S, and entries ``valid`` rules out, keep what they
    held (a scatter's ``mode="drop"``).

    One scatter, or (:data:`UNROLL_ROWS`) one ``dynamic_update_slice`` of each row's T
    contiguous slots: a block that would cross slot S slides back to end there and keeps the
    old entries in front of ``starts``, read before any write (reads between the writes, or
    fused with them, made XLA copy the whole cache).
    """
    b, t = values.shape[0], values.shape[-3]
    s = x.shape[2]
    values = values.astype(x.dtype)
    if layer is not None:
        values = values[:, None]  # [B, 1, T, G, E]
    if not _per_row(b, t, s):
        slots = starts[:, None] + jnp.arange(t)[None, :]  # [B, T]
        if valid is not None:
            slots = jnp.where(valid, slots, s)  # past S: dropped
        rows = jnp.arange(b)[:, None]
        if layer is None:
            return x.at[:, rows, slots].set(jnp.moveaxis(values, 1, 0), mode="drop")
        return x.at[layer, rows, slots].set(values[:, 0], mode="drop")
    if valid is None:
        valid = jnp.ones((b, t), bool)
    first, n = (0, x.shape[0]) if layer is None else (layer, 1)
    at = jnp.clip(starts, 0, s - t)  # [B] where each block lands
    rel = jnp.arange(t)[None, :] + (at - starts)[:, None]  # [B, T] the value each slot gets
    keep = (rel >= 0) & jnp.take_along_axis(valid, jnp.clip(rel, 0, t - 1), axis=1)  # [B, T]
    new = jnp.take_along_axis(values, jnp.clip(rel, 0, t - 1)[:, None, :, None, None], axis=2)
    size = (n, 1, t, *x.shape[3:])
    old = jnp.stack([lax.dynamic_slice(x, (first, r, at[r], 0, 0), size)[:, 0] for r in range(b)])
    blocks = jnp.where(keep[:, None, :, None, None], new, old)  # [B, N', T, G, E]
    for r in range(b):
        x = lax.dynamic_update_slice(x, blocks[r][:, None], (first, r, at[r], 0, 0))
    return x
