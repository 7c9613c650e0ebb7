"""SpecTr's k-sequential selection (k-SEQ) over a multi-path draft (ALGORITHMS.md §4.4)."""

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
from specjax.verify.tree_walk import first_true, tree_walk

BISECTION_STEPS = 30
"""Bisection steps for rho*: resolution (k - 1) / 2**30, below fp32 precision for k <= 8."""


def kseq_acceptance(p: Array, q: Array, k: Array, rho: Array) -> tuple[Array, Array]:
    """beta(rho) = sum_v min(q, p / rho) and p_acc = 1 - (1 - beta)^k. Each ``[B]``."""
    beta = jnp.sum(jnp.minimum(q, p / rho[:, None]), axis=-1)
    beta = jnp.clip(beta, 0.0, 1.0)
    p_acc = -jnp.expm1(k * jnp.log1p(-jnp.minimum(beta, 1.0 - jnp.finfo(p.dtype).epsneg)))
    p_acc = jnp.where(beta >= 1.0, 1.0, p_acc)
    return beta, jnp.where(k > 0, p_acc, 0.0)


def spectr_rho(p: Array, q: Array, k: Array) -> Array:
    """rho*: the smallest rho in [1, k] with p_acc(rho) / beta(rho) <= rho (bisection, in jit).

    The upper end of the final bracket is returned, so the validity condition always holds
    (the residual is non-negative); rho* = 1 for k <= 1.

    Args:
      p: ``[B, V]`` target distribution at the node.
      q: ``[B, V]`` draft distribution at the node.
      k: ``[B]`` number of i.i.d. drafts at the node.

    Returns:
      ``[B]`` rho*.
    """
    k = k.astype(p.dtype)

    def body(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        beta, p_acc = kseq_acceptance(p, q, k, mid)
        valid = p_acc <= mid * beta
        return jnp.where(valid, lo, mid), jnp.where(valid, mid, hi)

    lo = jnp.ones_like(k)
    _, hi = jax.lax.fori_loop(0, BISECTION_STEPS, body, (lo, jnp.maximum(k, 1.0)))
    return hi


def kseq_rule(p, q, tokens, candidates, u):  # [B, V], [B, V], [B, K], [B, K], [B, K]
    """k-SEQ at one node: each candidate accepted w.p. min(1, p/(rho q)), first accept wins."""
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
    residual = jnp.maximum(p - jnp.minimum(q, p / rho[:, None]) * scale[:, None], 0.0)
    return accepted, token.astype(jnp.int32), residual


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
      key: PRNG key (raw ``uint32[2]`` or typed).
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
