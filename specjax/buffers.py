"""Per-row token buffers: each row's new tokens written right after its committed ones."""

from __future__ import annotations

import jax.numpy as jnp

from specjax.typing import Array


def append_rows(tokens: Array, lengths: Array, new: Array, count: Array) -> Array:
    """``tokens`` with ``new[b, :count[b]]`` written at ``tokens[b, lengths[b]:]``.

    Args:
      tokens: int ``[B, U]`` the buffer.
      lengths: int ``[B]`` committed tokens per row (where each row's new tokens start).
      new: int ``[B, M]`` candidate tokens per row.
      count: int ``[B]`` how many of them to write (0 leaves a row untouched).

    Returns:
      The buffer ``[B, U]``; writes past U are dropped.
    """
    b, m = new.shape
    j = jnp.arange(m)[None, :]
    slots = jnp.where(j < count[:, None], lengths[:, None] + j, tokens.shape[1])  # [B, M]
    return tokens.at[jnp.arange(b)[:, None], slots].set(new, mode="drop")
