"""SpecTr's k-sequential selection (k-SEQ) over a multi-path draft (docs/algorithms.md)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.typing import Array, PRNGKey
from specjax.verify.common import (
    VerifyResult,
    check_multipath_inputs,
    compute_dtype,
    gather_tokens,
    valid_lengths,
)
from specjax.verify.tree_walk import NodeRule, first_true, tree_walk

MAX_PASSES = 40
"""Passes over V that :func:`spectr_rho` may take (it stops when its bracket is (k - 1) 2^-30
wide: 5-6 passes on the benchmark inputs, where bisection takes 30)."""

RESOLUTION = 2.0**-30
"""Bracket width for rho*, relative to k - 1: below fp32 precision for k <= 8."""

GRID, GRID_ROUNDS = 64, 5
"""The local model's root is found by evaluating the model at ``GRID`` points of its bracket at
once, ``GRID_ROUNDS`` times (the bracket shrinks 64-fold each time: 2^-30 in all). A scalar
bisection of 60 dependent steps per pass over V, each a tiny kernel, cost SpecTr 9 ms of a
B = 1 call on an H100 (benchmarks/history/, "On an H100"); on a CPU both take the same time."""


def kseq_acceptance(p: Array, q: Array, k: Array, rho: Array) -> tuple[Array, Array]:
    """beta(rho) = sum_v min(q, p / rho) and p_acc = 1 - (1 - beta)^k. Each ``[B]``."""
    beta = jnp.sum(jnp.minimum(q, p / rho[:, None]), axis=-1)
    return kseq_p_acc(beta, k)


def kseq_p_acc(beta: Array, k: Array) -> tuple[Array, Array]:
    """``(beta, p_acc)``: beta clipped to [0, 1] and 1 - (1 - beta)^k (0 for k = 0)."""
    beta = jnp.clip(beta, 0.0, 1.0)
    p_acc = -jnp.expm1(k * jnp.log1p(-jnp.minimum(beta, 1.0 - jnp.finfo(beta.dtype).epsneg)))
    p_acc = jnp.where(beta >= 1.0, 1.0, p_acc)
    return beta, jnp.where(k > 0, p_acc, 0.0)


def spectr_rho(p: Array, q: Array, k: Array) -> Array:
    """rho*: the smallest rho in [1, k] with p_acc(rho) / beta(rho) <= rho.

    Safeguarded Newton on the exact local model: one pass over V at a point rho_0 gives
    ``beta(rho) = A + C / rho`` (A = the q mass where q <= p / rho_0, C = the p mass elsewhere),
    exact until rho crosses a token's breakpoint p / q. The model's root (a scalar problem per
    row, located on a grid of the bracket: :data:`GRID`) is the next point; points outside the
    bracket, or a model whose root sits at an end of the bracket, fall back to bisection or to
    a probe just inside that end. The bracket ``[lo, hi]`` (hi always valid) shrinks to
    (k - 1) 2^-30 in a few passes instead of 30 bisection passes. The upper end is returned, so
    the validity condition always holds (the residual is non-negative); rho* = 1 for k <= 1.
    The passes are a ``lax.while_loop``, the one loop SpecTr keeps inside a decode step (one per
    depth): unrolled with masks, every step would pay :data:`MAX_PASSES` passes over V.

    Args:
      p: ``[B, V]`` target distribution at the node.
      q: ``[B, V]`` draft distribution at the node.
      k: ``[B]`` number of i.i.d. drafts at the node.

    Returns:
      ``[B]`` rho*.
    """
    k = k.astype(p.dtype)
    top = jnp.maximum(k, 1.0)
    # (k - 1) 2^-30, but at least a few ulps: a probe at hi - tol must differ from hi.
    tol = jnp.maximum((top - 1.0) * RESOLUTION, 4.0 * jnp.finfo(p.dtype).eps * top)

    def excess(rho, a, c):  # p_acc - rho beta of the local model, non-increasing in rho
        kk = k.reshape(k.shape + (1,) * (rho.ndim - k.ndim))
        beta, p_acc = kseq_p_acc(a + c / rho, kk)
        return p_acc - rho * beta

    def model_root(a, c, lo, hi):  # the model's root in [lo, hi], per row (see GRID)
        frac = jnp.arange(1, GRID + 1, dtype=lo.dtype) / GRID  # [GRID]
        a, c = a[:, None], c[:, None]
        for _ in range(GRID_ROUNDS):
            x = lo[:, None] + (hi - lo)[:, None] * frac  # [B, GRID]
            x = x.at[:, -1].set(hi)
            valid = excess(x, a, c) <= 0.0  # [B, GRID]: False, then True (monotone)
            i = first_true(valid)  # [B]
            found = jnp.any(valid, axis=-1)
            right = jnp.take_along_axis(x, i[:, None], axis=-1)[:, 0]
            left = jnp.take_along_axis(x, jnp.maximum(i - 1, 0)[:, None], axis=-1)[:, 0]
            lo = jnp.where(found & (i > 0), left, jnp.where(found, lo, hi))
            hi = jnp.where(found, right, hi)
        return hi

    def open_(state):
        lo, hi, _, passes = state
        return jnp.any((hi - lo > tol) & (0.5 * (lo + hi) > lo)) & (passes < MAX_PASSES)

    def step(state):
        lo, hi, x, passes = state
        x = jnp.clip(x, lo, hi)
        under = q <= p / x[:, None]  # tokens where min(q, p / x) = q
        a = jnp.sum(jnp.where(under, q, 0.0), axis=-1)
        c = jnp.sum(jnp.where(under, 0.0, p), axis=-1)
        valid = excess(x, a, c) <= 0.0
        active = hi - lo > tol
        lo = jnp.where(active & ~valid, x, lo)
        hi = jnp.where(active & valid, x, hi)
        root = model_root(a, c, lo, hi)
        mid = 0.5 * (lo + hi)
        # The model puts rho* at an end of the bracket: probe just inside that end, so the
        # bracket closes on the next pass; elsewhere follow the model (bisect if it leaves).
        nxt = jnp.where((root > lo) & (root < hi), root, mid)
        nxt = jnp.where(root <= lo + tol, jnp.minimum(lo + tol, mid), nxt)
        nxt = jnp.where(root >= hi - tol, jnp.maximum(hi - tol, mid), nxt)
        return lo, hi, nxt, passes + 1

    lo = jnp.ones_like(k)
    state = (lo, top, lo, jnp.zeros((), jnp.int32))  # the first pass probes rho = 1
    _, hi, _, _ = jax.lax.while_loop(open_, step, state)
    return hi


def kseq_decide(p, q, tokens, candidates, u):  # [B, V], [B, V], [B, K], [B, K], [B, K]
    """k-SEQ at one node: each candidate accepted w.p. min(1, p/(rho q)), first accept wins;
    the state is ``(rho, scale)`` ``[B]`` each (:func:`kseq_residual`)."""
    k = jnp.sum(candidates, axis=-1)  # [B]
    rho = spectr_rho(p, q, k)  # [B]
    beta, p_acc = kseq_acceptance(p, q, k.astype(p.dtype), rho)
    # For k = 1, p_acc == beta exactly (rho* = 1): ordinary speculative sampling.
    scale = jnp.where(k == 1, 1.0, p_acc / jnp.where(beta > 0.0, beta, 1.0))  # [B]
    p_x = gather_tokens(p, tokens)  # [B, K]
    q_x = gather_tokens(q, tokens)
    ok = candidates & (u * rho[:, None] * q_x < p_x)
    accepted = jnp.any(ok, axis=-1)
    token = jnp.take_along_axis(tokens, first_true(ok)[:, None], axis=-1)[:, 0]
    return accepted, token.astype(jnp.int32), (rho, scale)


def kseq_residual(p: Array, q: Array, state: tuple[Array, Array]) -> Array:
    """k-SEQ's residual weights ``max(p - min(q, p / rho) scale, 0)`` ``[B, V]``."""
    rho, scale = state
    return jnp.maximum(p - jnp.minimum(q, p / rho[:, None]) * scale[:, None], 0.0)


kseq_rule = NodeRule(kseq_decide, kseq_residual)
"""k-SEQ at one node (:class:`~specjax.verify.tree_walk.NodeRule`)."""


def spectr_verify(
    key: PRNGKey,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    *,
    num_draft: Array | None = None,
) -> VerifyResult:
    """SpecTr multi-path verification with k-SEQ at every node of the path tree.

    Args:
      key: PRNG key (raw ``uint32[2]`` or typed), or one per row (``[B]``: row b as if
        verified alone with ``key[b]``).
      draft_tokens: int ``[B, K, L]`` i.i.d. draft paths (-1 = padding).
      draft_probs: ``[B, K, L, V]``; paths sharing a prefix carry identical rows for it.
      target_probs: ``[B, K, L+1, V]``; row (k, L) is the bonus distribution after path k.
      num_draft: optional int ``[B, K]`` valid tokens per path.

    Returns:
      VerifyResult, each int32 ``[B]``. K = 1 gives exactly :func:`token_verify`.
    """
    check_multipath_inputs("spectr_verify", draft_tokens, draft_probs, target_probs, num_draft)
    dtype = compute_dtype(draft_probs, target_probs)
    n = valid_lengths(num_draft, draft_tokens, draft_probs.shape[-1])
    return tree_walk(
        key, draft_tokens, draft_probs.astype(dtype), target_probs.astype(dtype), n, kseq_rule
    )
