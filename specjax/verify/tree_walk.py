"""The multi-path tree walk shared by SpecInfer and SpecTr (docs/algorithms.md, "Tree walks").

Paths are path-major ``[B, K, L]``; the paths alive at depth d are those whose first d tokens
equal the accepted prefix, so they all sit at the same tree node and carry identical
distribution rows. At each depth a *node rule* decides, from the candidates' tokens, whether one
of them is accepted (the walk then descends into it) or a residual token is emitted (the walk
stops there: a residual draw is the correction token and is never matched against children).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from specjax.typing import Array, PRNGKey
from specjax.verify.common import (
    VerifyResult,
    sample_with,
    take_row,
    verifier_uniforms,
)
from specjax.verify.rows import map_row_chunks

NodeRule = Callable[[Array, Array, Array, Array, Array], tuple[Array, Array, Array]]
"""``rule(p [B, V], q [B, V], tokens [B, K], candidates [B, K], u [B, K])`` ->
``(accepted [B] bool, accepted_token [B] int32, residual [B, V] unnormalised weights)``."""


def first_true(mask: Array) -> Array:
    """Index of the first True along the last axis (0 if none). int32 ``[...]``."""
    return jnp.argmax(mask, axis=-1).astype(jnp.int32)


def take_path_row(probs: Array, path: Array, depth: int) -> Array:
    """``probs[b, path[b], depth]`` for ``probs [B, K, L or L + 1, V]`` -> ``[B, V]``: one gather
    of whole rows (slicing ``probs[:, :, depth]`` first makes XLA:CPU copy a strided view)."""
    b, k, r, v = probs.shape
    return take_row(probs.reshape(b, k * r, v), path * r + depth)


def tree_walk(
    key: PRNGKey,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    n: Array,
    rule: NodeRule,
) -> VerifyResult:
    """Walks the draft tree depth by depth with ``rule`` deciding at each node.

    Args:
      key: PRNG key.
      draft_tokens: int ``[B, K, L]``.
      draft_probs: ``[B, K, L, V]`` float (already in the compute dtype).
      target_probs: ``[B, K, L+1, V]``.
      n: int32 ``[B, K]`` valid draft length per path.
      rule: the per-node acceptance rule (see :data:`NodeRule`).

    Returns:
      VerifyResult; ``path`` is the smallest index among the paths alive when the walk stops.
    """
    b, k, l = draft_tokens.shape
    u, u_y = verifier_uniforms(key, b, (l, k), draft_probs.dtype)  # [B, L, K], [B, 2]
    walk = lambda *rows: walk_rows(*rows, rule=rule)
    return map_row_chunks(walk, draft_tokens, draft_probs, target_probs, n, u, u_y)


def walk_rows(
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    n: Array,
    u: Array,
    u_y: Array,
    *,
    rule: NodeRule,
) -> VerifyResult:
    """The walk of :func:`tree_walk` given its uniforms: ``u [B, L, K]`` for the node rules and
    ``u_y [B, 2]`` for the emitted token.

    The depths are a ``lax.while_loop`` that stops once every row's walk has stopped (the
    depths below cannot change the result), and its carry materialises each depth's per-row
    state: unrolled, XLA:CPU fused the whole history of accept decisions into every ``[B, V]``
    loop and recomputed it for each vocabulary entry (40x the read-once time at B = 1, L = 8).
    """
    b, k, l = draft_tokens.shape

    def open_(carry):
        d, _, done, *_ = carry
        return (d < l) & ~jnp.all(done)

    def depth(carry):
        d, alive, done, tau, weights, fallback = carry
        rep = first_true(alive)  # [B] any alive path: all share the node's rows
        p_d = take_path_row(target_probs, rep, d)  # [B, V]
        q_d = take_path_row(draft_probs, rep, d)  # [B, V]
        tokens_d = jax.lax.dynamic_index_in_dim(draft_tokens, d, axis=2, keepdims=False)
        u_d = jax.lax.dynamic_index_in_dim(u, d, axis=1, keepdims=False)  # [B, K]
        candidates = alive & (d < n) & (tokens_d >= 0) & ~done[:, None]
        accepted, token, residual = rule(p_d, q_d, tokens_d, candidates, u_d)
        accepted = accepted & ~done
        stop = ~done & ~accepted
        weights = jnp.where(stop[:, None], residual, weights)
        fallback = jnp.where(stop[:, None], p_d, fallback)
        alive = jnp.where(accepted[:, None], candidates & (tokens_d == token[:, None]), alive)
        tau = jnp.where(accepted, d + 1, tau)
        return d + 1, alive, done | stop, tau, weights, fallback

    rows = jnp.zeros(draft_probs.shape[:1] + draft_probs.shape[-1:], draft_probs.dtype)
    flags = (jnp.ones((b, k), bool), jnp.zeros((b,), bool), jnp.zeros((b,), jnp.int32))
    carry = (jnp.zeros((), jnp.int32), *flags, rows, rows)
    _, alive, done, tau, weights, fallback = jax.lax.while_loop(open_, depth, carry)
    path = first_true(alive)
    bonus = take_path_row(target_probs, path, l)  # [B, V]
    weights = jnp.where(done[:, None], weights, bonus)
    fallback = jnp.where(done[:, None], fallback, bonus)
    next_token = sample_with(u_y, weights, fallback)
    return VerifyResult(tau, next_token, path)
