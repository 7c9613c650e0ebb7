"""The multi-path tree walk shared by SpecInfer and SpecTr (docs/algorithms.md, "Tree walks").

Paths are path-major ``[B, K, L]``; the paths alive at depth d are those whose first d tokens
equal the accepted prefix, so they all sit at the same tree node and carry identical
distribution rows. At each depth a *node rule* decides, from the candidates' tokens, whether one
of them is accepted (the walk then descends into it) or a residual token is emitted (the walk
stops there: a residual draw is the correction token and is never matched against children).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from specjax.typing import Array, PRNGKey
from specjax.verify.common import (
    VerifyResult,
    cut_at,
    invalid_laws,
    sample_with,
    take_row,
    verifier_uniforms,
)
from specjax.verify.rows import map_row_chunks


class NodeRule(NamedTuple):
    """The decision at one node, in two parts.

    Attributes:
      decide: ``(p [B, V], q [B, V], tokens [B, K], candidates [B, K], u [B, K])`` ->
        ``(accepted [B] bool, accepted_token [B] int32, state)``, ``state`` a pytree of
        ``[B, ...]`` arrays from which ``residual`` rebuilds the node's residual.
      residual: ``(p [B, V], q [B, V], state)`` -> ``[B, V]`` unnormalised weights of the token
        emitted where the walk stops at that node. The walk keeps only the stopping node's
        state, and its p and q rows are gathered again once the walk ends: a ``[B, V]`` row
        carried through the depths is written at every depth.
    """

    decide: Callable[[Array, Array, Array, Array, Array], tuple[Array, Array, object]]
    residual: Callable[[Array, Array, object], Array]


def first_true(mask: Array) -> Array:
    """Index of the first True along the last axis (0 if none). int32 ``[...]``."""
    return jnp.argmax(mask, axis=-1).astype(jnp.int32)


def take_path_row(probs: Array, path: Array, depth: int, rows: Array | None = None) -> Array:
    """``probs[rows[b], path[b], depth]`` for ``probs [B', K, L or L + 1, V]`` -> ``[B, V]``
    (``rows [B]`` int, default ``arange(B')``): one gather of whole rows (slicing
    ``probs[:, :, depth]`` first makes XLA:CPU copy a strided view)."""
    b, k, r, v = probs.shape
    if rows is None:
        return take_row(probs.reshape(b, k * r, v), path * r + depth)
    return jnp.take(probs.reshape(b * k * r, v), (rows * k + path) * r + depth, axis=0, mode="clip")


def tree_walk(
    key: PRNGKey,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    n: Array,
    rule: NodeRule,
) -> VerifyResult:
    """Walks the draft tree depth by depth with ``rule`` deciding at each node.

    ``n`` is first cut at the first draft law that is not a probability vector, and a node's
    draft row that is no law enters the rule as zeros (as if copied clean:
    :func:`~specjax.verify.common.sanitize_draft`).

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
    bad = invalid_laws(draft_probs)  # [B, K, L]: on the whole input, which is not copied
    n = cut_at(bad, n)
    walk = lambda *args: walk_rows(*args, rule=rule)
    return map_row_chunks(walk, draft_tokens, n, u, u_y, bad, whole=(draft_probs, target_probs))


def walk_rows(
    draft_tokens: Array,
    n: Array,
    u: Array,
    u_y: Array,
    bad: Array,
    draft_probs: Array,
    target_probs: Array,
    rows: Array,
    *,
    rule: NodeRule,
) -> VerifyResult:
    """The walk of :func:`tree_walk` for the batch rows ``rows [C]`` of ``draft_probs`` and
    ``target_probs`` (read by gathers, never sliced: a slice the loop reads is copied), given
    their ``draft_tokens [C, K, L]``, lengths ``n [C, K]``, uniforms ``u [C, L, K]`` for the
    node rules and ``u_y [C, 2]`` for the emitted token, and bad laws ``bad [C, K, L]``.

    The L depths are unrolled, each after the first under a ``lax.cond`` that skips it once
    every walk has stopped: a loop inside a decode step splits its GPU graph (and this one,
    data-dependent, synced with the host at each depth), while a conditional is recorded into
    the graph. A stopped walk's state is frozen (every update is masked by ``done``), so the
    result is the early-stopping loop's. The conditional also materialises each depth's
    per-row state, as the loop's carry did: unrolled without one, XLA fused the whole history
    of accept decisions into every ``[B, V]`` loop and recomputed it there (XLA:CPU: 40x the
    read-once time at B = 1, L = 8, and ~15x the loop's compile time at K = 4, L = 8; an
    ``optimization_barrier`` is gone before fusion).
    """
    b, k, l = draft_tokens.shape

    def rows_at(path, d):  # p and q rows of node (path, d) [B, V]; a bad law is read as zeros
        q_d = take_path_row(draft_probs, path, jnp.minimum(d, l - 1), rows)
        bad_d = take_path_row(bad[..., None], path, jnp.minimum(d, l - 1))  # [B, 1]
        # A select, not arithmetic: the rule must not see a NaN (NaN * 0 = NaN).
        q_d = jnp.where(bad_d, jnp.zeros((), q_d.dtype), q_d)
        return take_path_row(target_probs, path, d, rows), q_d

    def depth(d: int, carry):
        alive, done, tau, stop_path, stop_depth, state = carry
        rep = first_true(alive)  # [B] any alive path: all share the node's rows
        p_d, q_d = rows_at(rep, d)  # [B, V]
        tokens_d, u_d = draft_tokens[:, :, d], u[:, d]  # [B, K] each
        candidates = alive & (d < n) & (tokens_d >= 0) & ~done[:, None]
        accepted, token, state_d = rule.decide(p_d, q_d, tokens_d, candidates, u_d)
        accepted = accepted & ~done
        stop = ~done & ~accepted
        keep = lambda new, old: jnp.where(stop.reshape(-1, *([1] * (old.ndim - 1))), new, old)
        state = jax.tree.map(keep, state_d, state)
        stop_path = jnp.where(stop, rep, stop_path)
        stop_depth = jnp.where(stop, d, stop_depth)
        alive = jnp.where(accepted[:, None], candidates & (tokens_d == token[:, None]), alive)
        tau = jnp.where(accepted, d + 1, tau)
        return alive, done | stop, tau, stop_path, stop_depth, state

    rows_0 = jax.eval_shape(rows_at, jnp.zeros((b,), jnp.int32), 0)
    shapes = jax.eval_shape(rule.decide, *rows_0, draft_tokens[:, :, 0], u[:, 0] > 0, u[:, 0])[2]
    state = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
    ints = jnp.zeros((b,), jnp.int32)
    flags = (jnp.ones((b, k), bool), jnp.zeros((b,), bool), ints, ints, ints)
    carry = depth(0, (*flags, state))
    for d in range(1, l):
        carry = jax.lax.cond(jnp.all(carry[1]), lambda c: c, functools.partial(depth, d), carry)
    alive, done, tau, stop_path, stop_depth, state = carry
    path = first_true(alive)
    # The node the walk stopped at, or the bonus row after the accepted path.
    p_end, q_end = rows_at(jnp.where(done, stop_path, path), jnp.where(done, stop_depth, l))
    weights = jnp.where(done[:, None], rule.residual(p_end, q_end, state), p_end)
    next_token = sample_with(u_y, weights, p_end)
    return VerifyResult(tau, next_token, path)
