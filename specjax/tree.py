"""Draft-tree topology as static index arrays: K paths of L tokens hanging from one root.

The target scores a speculative step in one call over ``T = 1 + K * L`` tokens: the root (the last
committed token, not yet in the cache) followed by the path nodes in path-major order, node
``(k, i)`` at index ``1 + k * L + i``. Paths are not deduplicated: paths sharing a prefix carry
identical copies of it (docs/algorithms.md, conventions), so every path is a plain chain.

The draft grows the same tree one depth per call: call ``i`` (1 <= i < L) feeds the K tokens of
depth ``i - 1``, written after the root at slot ``base + (i - 1) * K + k``; each may attend only to
its own path's earlier nodes (:func:`draft_kv_mask`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.typing import Array


def tree_size(num_paths: int, draft_len: int) -> int:
    """T, the tokens of one target verification call: the root plus K * L nodes."""
    return 1 + num_paths * draft_len


def tree_depths(num_paths: int, draft_len: int) -> np.ndarray:
    """int ``[T]``: position offset of each tree token from the root (root 0, node (k, i) i + 1)."""
    return np.concatenate([[0], np.tile(np.arange(1, draft_len + 1), num_paths)]).astype(np.int32)


def tree_mask(num_paths: int, draft_len: int) -> np.ndarray:
    """bool ``[T, T]``: token a may attend to token b (b is a or an ancestor of a)."""
    path = np.concatenate([[-1], np.repeat(np.arange(num_paths), draft_len)])  # root: -1
    depth = tree_depths(num_paths, draft_len)
    same_path = (path[:, None] == path[None, :]) | (path[None, :] == -1)
    return same_path & (depth[None, :] <= depth[:, None])


def node_index(num_paths: int, draft_len: int) -> np.ndarray:
    """int ``[K, L + 1]``: tree index of the token whose logits give row (k, i) of target_probs.

    Row 0 of every path is the root's distribution; row i + 1 is node (k, i)'s.
    """
    k = np.arange(num_paths)[:, None]
    i = np.arange(draft_len)[None, :]
    nodes = 1 + k * draft_len + i  # [K, L]
    return np.concatenate([np.zeros((num_paths, 1), np.int64), nodes], axis=1).astype(np.int32)


def path_slots(base: Array, path: Array, draft_len: int) -> Array:
    """int ``[B, L]``: target-cache slots of path ``path [B]``'s nodes when the root sits at
    slot ``base - 1`` (node (k, i) was written at ``base + k * L + i``)."""
    i = jnp.arange(draft_len)[None, :]
    return base[:, None] + path[:, None] * draft_len + i


def path_nodes(values: Array, path: Array, draft_len: int) -> Array:
    """``[B, L + 1, ...]``: the root's and path ``path [B]``'s rows of per-node ``values
    [B, T, ...]`` (T = 1 + K·L, path-major), e.g. the target's features at the followed path."""
    idx = jnp.concatenate(
        [jnp.zeros_like(path)[:, None], 1 + path[:, None] * draft_len + jnp.arange(draft_len)],
        axis=1,
    )  # [B, L + 1]
    idx = idx.reshape(idx.shape + (1,) * (values.ndim - 2))
    return jnp.take_along_axis(values, idx, axis=1)


def draft_path_slots(base: Array, path: Array, num_paths: int, draft_len: int) -> Array:
    """int ``[B, L - 1]``: draft-cache slots of path ``path [B]``'s depth 1 .. L-1 inputs, laid out
    by :func:`draft_kv_mask` (depth j at ``base + (j - 1) * K + k``)."""
    j = jnp.arange(draft_len - 1)[None, :]
    return base[:, None] + j * num_paths + path[:, None]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LevelMask:
    """Which cache slots the w nodes of one level of a tree grown level by level may attend
    to, kept as the rule rather than as a ``[B, w, S]`` mask: attention asks for the slots it
    reads (:meth:`allowed`), so a call costs what the cache holds, not its capacity.

    Level j's w nodes sit at slots ``scratch + j * w + i``; a node of column i sees the first
    ``visible[b, i]`` slots (the committed prefix, and whatever else that column shares) and its
    own column's nodes of the first ``levels`` levels. The draft tree (:func:`draft_kv_mask`:
    w = K paths) and SSD's branches (:func:`level_kv_mask`: w = C, each also seeing the glue of
    its accepted tokens) are both such trees.

    Attributes:
      visible: int ``[B, w]`` leading slots each column sees.
      scratch: int ``[B]`` first slot of level 0.
      levels: int ``[]`` levels written so far (including the one being fed).
    """

    visible: Array
    scratch: Array
    levels: Array

    def allowed(self, start: Array | int, size: int) -> Array:
        """bool ``[B, w, size]``: the rule over the ``size`` slots from ``start``."""
        width = self.visible.shape[1]
        s = start + jnp.arange(size)[None, None, :]  # [1, 1, size]
        rel = s - self.scratch[:, None, None]  # [B, 1, size]
        column = jnp.arange(width)[None, :, None]  # [1, w, 1]
        own = (rel >= 0) & (rel < self.levels * width) & (rel % width == column)
        return (s < self.visible[..., None]) | own

    def distances(self, positions: Array, start: Array | int, size: int) -> Array:
        """int ``[B, w, size]``: how many positions the node being fed in each column (at
        ``positions [B, w]``, on the last level) lies after each of the ``size`` slots from
        ``start``, where it may see them: a visible slot holds the position of its index (the
        prefix is laid out from slot 0), and each level of the node's own column is one
        position further along than the one before it."""
        width = self.visible.shape[1]
        s = start + jnp.arange(size)[None, None, :]  # [1, 1, size]
        rel = s - self.scratch[:, None, None]  # [B, 1, size]
        in_prefix = s < self.visible[..., None]  # [B, w, size]
        levels_back = self.levels - 1 - jnp.floor_divide(rel, width)  # [B, 1, size]
        return jnp.where(in_prefix, positions[..., None] - s, levels_back)


def draft_kv_mask(base: Array, depth: Array, num_paths: int) -> LevelMask:
    """What path k's depth-``depth`` input may attend to: the committed prefix and its own
    path's earlier inputs.

    Args:
      base: int ``[B]`` draft-cache length after the root was fed (committed entries).
      depth: scalar int, 1 <= depth < L: the depth being fed (its tokens written at
        ``base + (depth - 1) * K + k``).
      num_paths: K.
    """
    visible = jnp.broadcast_to(base[:, None], (base.shape[0], num_paths))
    return level_kv_mask(visible, base, depth)


def level_kv_mask(visible: Array, scratch: Array, levels: Array) -> LevelMask:
    """The :class:`LevelMask` of a tree grown level by level (its attributes, ``levels`` made
    an array)."""
    return LevelMask(visible, scratch, jnp.asarray(levels, jnp.int32))
