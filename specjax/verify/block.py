"""Block verification (Sun et al., arXiv 2403.10444), scan-free and in log space.

The rule and why it is exact: docs/algorithms.md, "Block verification".

The weights ``w_i = min(w_{i-1} p_i(x_i)/q_i(x_i), 1)`` are computed in closed form as
``log w_i = S_i - max_{j<=i} S_j`` with ``S`` the cumulative sum of ``log p - log q`` (cumsum plus
running max), so the whole verifier is a handful of fused ``[B, L, V]`` reductions with no
sequential dependency. The accepted length follows the *last success wins* rule.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from specjax.typing import Array, PRNGKey
from specjax.verify.common import (
    VerifyResult,
    check_chain_inputs,
    compute_dtype,
    cut_at,
    take_token_prob,
    valid_lengths,
    verifier_uniforms,
)
from specjax.verify.rows import map_row_chunks
from specjax.verify.token import chain_correction


def block_weights_and_stops(
    draft_tokens: Array, draft_probs: Array, target_probs: Array, n: Array
) -> tuple[Array, Array]:
    """The block-verification weights and stop probabilities.

    Args:
      draft_tokens: int ``[B, L]``.
      draft_probs: ``[B, L, V]`` (fp32 or fp64).
      target_probs: ``[B, L+1, V]`` (same dtype).
      n: int32 ``[B]`` valid draft length per row.

    Returns:
      ``(log_w, h)``, both ``[B, L+1]``: ``log_w[:, i]`` = log w_i after i accepted tokens
      (``log_w[:, 0] = 0``), and ``h[:, i]`` = P(stop at i | reached from the back), with
      ``h_i = Z_i / (Z_i + 1 - w_i)`` for i < n, ``h_n = w_n`` and ``h_i = 0`` past n.
    """
    log_w, z = block_weights(draft_tokens, draft_probs, target_probs)
    return log_w, block_stops(log_w, z, n)


def block_weights(
    draft_tokens: Array, draft_probs: Array, target_probs: Array
) -> tuple[Array, Array]:
    """``(log_w [B, L+1], Z [B, L])`` of :func:`block_weights_and_stops`; ``Z_i`` is NaN where
    draft row i is not a probability vector (a NaN, an infinity or a negative entry)."""
    b, l, _ = draft_probs.shape
    dtype = draft_probs.dtype
    # A log-ratio beyond +-big saturates w to exactly 1 (q = 0) or to 0 (p = 0) in this dtype.
    big = -2.0 * math.log(float(jnp.finfo(dtype).tiny))
    p_x = take_token_prob(target_probs[:, :l], draft_tokens)  # [B, L]
    q_x = take_token_prob(draft_probs, draft_tokens)  # [B, L]
    safe_log = lambda x: jnp.log(jnp.where(x > 0.0, x, 1.0))
    log_ratio = jnp.where(
        p_x > 0.0,
        jnp.where(q_x > 0.0, safe_log(p_x) - safe_log(q_x), big),
        -big,
    )  # [B, L]
    log_ratio = jnp.clip(log_ratio, -big, big)
    s = jnp.concatenate([jnp.zeros((b, 1), dtype), jnp.cumsum(log_ratio, axis=-1)], axis=-1)
    log_w = s - jax.lax.cummax(s, axis=1)  # [B, L+1], <= 0
    w = jnp.exp(log_w[:, :l])  # [B, L]  w_0 .. w_{L-1}
    # Z_i = sum_v max(w_i p_{i+1}(v) - q_{i+1}(v), 0): one fused [B, L, V] reduction (written
    # as a select, which XLA:CPU runs at about twice the speed of the max form). The same pass
    # checks the draft laws: an entry that is NaN, infinite or negative makes Z_i NaN (the
    # law check of every verifier, here at no extra pass; valid rows' Z is unchanged).
    wp = w[:, :, None] * target_probs[:, :l]  # [B, L, V]
    excess = jnp.where(wp > draft_probs, wp - draft_probs, 0.0)
    law = (draft_probs >= 0.0) & (draft_probs < jnp.inf)  # False for NaN too
    z = jnp.sum(jnp.where(law, excess, jnp.nan), axis=-1)
    return log_w, z


def block_stops(log_w: Array, z: Array, n: Array) -> Array:
    """``h [B, L+1]`` of :func:`block_weights_and_stops` from ``log_w [B, L+1]``, ``Z [B, L]``
    and ``n [B]`` (rows of Z from n on are never read into h: they may be NaN)."""
    b, l = z.shape
    denom = z - jnp.expm1(log_w[:, :l])  # Z_i + 1 - w_i, with 1 - w_i computed exactly
    h_inner = jnp.where(denom > 0.0, z / jnp.where(denom > 0.0, denom, 1.0), 1.0)  # [B, L]
    idx = jnp.arange(l + 1)[None, :]
    h_inner = jnp.concatenate([h_inner, jnp.zeros((b, 1), z.dtype)], axis=-1)  # [B, L+1]
    return jnp.where(idx < n[:, None], h_inner, jnp.where(idx == n[:, None], jnp.exp(log_w), 0.0))


def block_uniforms(key: PRNGKey, batch: int, length: int, dtype) -> tuple[Array, Array]:
    """``(eta [B, L], u_y [B, 2])``: the stop tests and the emitted token's draw."""
    return verifier_uniforms(key, batch, (length,), dtype)  # eta for i = 1..L


def block_verify_rows(
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    n: Array,
    eta: Array,
    u_y: Array,
) -> VerifyResult:
    """Block verification on validated, float inputs with explicit valid lengths ``n [B]`` and
    the uniforms of :func:`block_uniforms`; ``n`` is cut here at the first draft law that is
    not a probability vector (past it the laws are only selected away, never computed with).

    Shared by :func:`block_verify` and GBV (which passes its skewed draft rows).
    """
    b, l = draft_tokens.shape
    log_w, z = block_weights(draft_tokens, draft_probs, target_probs)
    n = cut_at(jnp.isnan(z), n)  # [B]
    h = block_stops(log_w, z, n)
    idx = jnp.arange(1, l + 1)[None, :]
    success = eta < h[:, 1:]  # h_0 = 1, so tau >= 0; h = 0 past n
    tau = jnp.max(jnp.where(success, idx, 0), axis=-1).astype(jnp.int32)  # last success wins
    w_tau = jnp.exp(jnp.take_along_axis(log_w, tau[:, None], axis=-1)[:, 0])  # [B]
    next_token = chain_correction(u_y, tau, n, w_tau, draft_probs, target_probs)
    return VerifyResult(tau, next_token, jnp.zeros((b,), jnp.int32))


def block_verify(
    key: PRNGKey,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    *,
    num_draft: Array | None = None,
) -> VerifyResult:
    """Block verification: the optimal lossless verifier for one draft chain.

    Args:
      key: PRNG key (raw ``uint32[2]`` or typed), or one per row (``[B]``: row b as if
        verified alone with ``key[b]``).
      draft_tokens: int ``[B, L]`` drafted tokens (-1 = padding, never accepted).
      draft_probs: ``[B, L, V]``; row i is the law draft token i was sampled from.
      target_probs: ``[B, L+1, V]``; row L is the bonus distribution.
      num_draft: optional int ``[B]`` valid draft tokens per row.

    Returns:
      VerifyResult (``num_accepted``, ``next_token``, ``path`` = 0), each int32 ``[B]``. Never
      accepts fewer tokens than :func:`token_verify` in expectation; equal to it for L = 1.
    """
    b, l, _ = check_chain_inputs("block_verify", draft_tokens, draft_probs, target_probs, num_draft)
    dtype = compute_dtype(draft_probs, target_probs)
    n = valid_lengths(num_draft, draft_tokens, draft_probs.shape[-1])
    eta, u_y = block_uniforms(key, b, l, dtype)
    return map_row_chunks(
        block_verify_rows,
        draft_tokens,
        draft_probs.astype(dtype),
        target_probs.astype(dtype),
        n,
        eta,
        u_y,
    )
