"""Standard token-level speculative sampling (Leviathan et al.; docs/algorithms.md)."""

from __future__ import annotations

import jax.numpy as jnp

from specjax.typing import Array, PRNGKey
from specjax.verify.common import (
    VerifyResult,
    check_chain_inputs,
    compute_dtype,
    cut_at,
    invalid_laws,
    sample_with,
    take_row,
    take_token_prob,
    valid_lengths,
    verifier_uniforms,
)
from specjax.verify.rows import map_row_chunks


def chain_correction(
    u: Array,
    tau: Array,
    n: Array,
    weight: Array,
    draft_probs: Array,
    target_probs: Array,
) -> Array:
    """The token emitted after tau accepted draft tokens of a chain.

    If tau < n it is drawn from ``normalize(max(weight * p_tau - q_tau, 0))`` (rows tau of
    ``target_probs`` and ``draft_probs``; ``weight`` = 1 for token verification, w_tau for block
    verification); if tau == n it is drawn from the target row n (the bonus). A residual with no
    mass (only possible through float drift) falls back to the target row. Draft rows from n on
    may be laws that are not probability vectors (the cut of
    :func:`~specjax.verify.common.sanitize_draft`): they are never selected.

    Args:
      u: ``[B, 2]`` uniforms of the draw (:func:`~specjax.verify.common.correction_uniforms`).
      tau: int32 ``[B]`` accepted tokens.
      n: int32 ``[B]`` valid draft length per row.
      weight: ``[B]`` scale of the target distribution in the residual.
      draft_probs: ``[B, L, V]``.
      target_probs: ``[B, L+1, V]``.

    Returns:
      int32 ``[B]`` tokens.
    """
    l = draft_probs.shape[1]
    p_row = take_row(target_probs, tau)  # [B, V]
    q_row = take_row(draft_probs, jnp.minimum(tau, l - 1))  # [B, V]
    residual = jnp.maximum(weight[:, None] * p_row - q_row, 0.0)  # [B, V]
    weights = jnp.where((tau < n)[:, None], residual, p_row)
    return sample_with(u, weights, p_row)


def token_verify(
    key: PRNGKey,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    *,
    num_draft: Array | None = None,
) -> VerifyResult:
    """Token verification: accept x_i w.p. min(1, p_i(x_i)/q_i(x_i)) until the first rejection.

    Args:
      key: PRNG key (raw ``uint32[2]`` or typed), or one per row (``[B]``: row b as if
        verified alone with ``key[b]``).
      draft_tokens: int ``[B, L]`` drafted tokens (-1 = padding, never accepted).
      draft_probs: ``[B, L, V]``; row i is the law draft token i was sampled from.
      target_probs: ``[B, L+1, V]``; row L is the bonus distribution.
      num_draft: optional int ``[B]`` valid draft tokens per row.

    Returns:
      VerifyResult (``num_accepted``, ``next_token``, ``path`` = 0), each int32 ``[B]``.
    """
    b, l, _ = check_chain_inputs("token_verify", draft_tokens, draft_probs, target_probs, num_draft)
    dtype = compute_dtype(draft_probs, target_probs)
    draft_probs = draft_probs.astype(dtype)
    target_probs = target_probs.astype(dtype)
    n = valid_lengths(num_draft, draft_tokens, draft_probs.shape[-1])  # [B]
    # The law check reads the whole input, outside the row chunks: a chunk is copied first.
    n = cut_at(invalid_laws(draft_probs), n)
    u, u_y = verifier_uniforms(key, b, (l,), dtype)  # [B, L], [B, 2]
    return map_row_chunks(token_rows, draft_tokens, draft_probs, target_probs, n, u, u_y)


def token_rows(
    draft_tokens: Array, draft_probs: Array, target_probs: Array, n: Array, u: Array, u_y: Array
) -> VerifyResult:
    """Token verification given its uniforms: ``u [B, L]`` for the tests, ``u_y [B, 2]`` for
    the emitted token; inputs validated, float, with valid lengths ``n [B]`` (cut at the first
    draft law that is not a probability vector: the laws past it are only selected away)."""
    b, l = draft_tokens.shape
    p_x = take_token_prob(target_probs[:, :l], draft_tokens)  # [B, L]
    q_x = take_token_prob(draft_probs, draft_tokens)  # [B, L]
    valid = (jnp.arange(l)[None, :] < n[:, None]) & (draft_tokens >= 0)
    accept = (u * q_x < p_x) & valid  # [B, L]; q = 0 < p accepts, p = 0 rejects
    tau = jnp.sum(jnp.cumprod(accept.astype(jnp.int32), axis=-1), axis=-1).astype(jnp.int32)
    one = jnp.ones((b,), draft_probs.dtype)
    next_token = chain_correction(u_y, tau, n, one, draft_probs, target_probs)
    return VerifyResult(tau, next_token, jnp.zeros((b,), jnp.int32))
