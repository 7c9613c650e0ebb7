"""The explicit KV cache: a pytree passed into every model call and returned, never module state.

Layout: ``k`` and ``v`` are ``[num_layers, B, S, G, E]`` (S = capacity); ``lengths [B]`` counts the
committed entries of each row. A model call with T new tokens writes their keys and values at
slots ``lengths .. lengths + T - 1`` of each row and returns the cache with ``lengths + T``.
Speculative decoding then keeps only the accepted entries: :meth:`KVCache.rollback` shortens
rows, :meth:`KVCache.compact` moves the accepted path's entries (scattered over a draft tree) into
contiguous slots.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.models.config import LlamaConfig
from specjax.typing import Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
    """Keys, values and per-row lengths of every layer.

    Attributes:
      k: ``[num_layers, B, S, G, E]`` keys (rotary embedding already applied).
      v: ``[num_layers, B, S, G, E]`` values.
      lengths: int32 ``[B]`` committed entries per row; slots at or past it are stale.
    """

    k: Array
    v: Array
    lengths: Array

    @classmethod
    def init(
        cls, config: LlamaConfig, batch: int, capacity: int | None = None, dtype=None
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
        b, m = sources.shape
        rows = jnp.arange(b)[:, None]
        src = jnp.clip(sources, 0, self.capacity - 1)
        keep = jnp.arange(m)[None, :] < count[:, None]  # [B, M]
        dest = jnp.where(keep, base[:, None] + jnp.arange(m)[None, :], self.capacity)  # OOB: drop

        def move(x):  # [N, B, S, G, E]
            picked = x[:, rows, src]  # [N, B, M, G, E], read before any write
            return x.at[:, rows, dest].set(picked, mode="drop")

        return KVCache(move(self.k), move(self.v), (base + count).astype(jnp.int32))
