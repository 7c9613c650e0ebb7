"""Greedy (temperature-0) chain verification (docs/algorithms.md, "Greedy verification")."""

from __future__ import annotations

import jax.numpy as jnp

from specjax.typing import Array, PRNGKey
from specjax.verify.common import (
    VerifyResult,
    argmax_first,
    check_chain_inputs,
    cut_at,
    invalid_laws,
    valid_lengths,
)


def greedy_verify(
    key: PRNGKey,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    *,
    num_draft: Array | None = None,
) -> VerifyResult:
    """Accepts the longest draft prefix that matches the target's argmax, then emits its argmax.

    Args:
      key: unused (the rule is deterministic); accepted for a uniform verifier signature.
      draft_tokens: int ``[B, L]`` drafted tokens (-1 = padding, never accepted).
      draft_probs: ``[B, L, V]`` draft distributions (read only to end the draft at a law
        that is not a probability vector, as every verifier does).
      target_probs: ``[B, L+1, V]`` target distributions; row L is the bonus distribution.
      num_draft: optional int ``[B]`` valid draft tokens per row.

    Returns:
      VerifyResult with ``num_accepted`` tau ``[B]``, ``next_token`` = argmax of target row tau
      ``[B]`` and ``path`` = 0 ``[B]``. Ties in the argmax go to the first maximal index, exactly
      as ``jnp.argmax`` in the autoregressive baseline.
    """
    del key
    check_chain_inputs("greedy_verify", draft_tokens, draft_probs, target_probs, num_draft)
    return greedy_rule(draft_tokens, cut_at(invalid_laws(draft_probs), num_draft), target_probs)


def greedy_rule(draft_tokens: Array, num_draft: Array | None, target_probs: Array) -> VerifyResult:
    """:func:`greedy_verify` after its input checks and the draft-law check: the longest prefix
    of ``draft_tokens [B, L]`` (cut at ``num_draft [B]``) that matches the argmax of
    ``target_probs [B, L+1, V]``, and the argmax after it. It reads no draft law; the
    benchmarks time it apart to price the law check (``bench_verify.py --parts=greedy``)."""
    b, l = draft_tokens.shape
    n = valid_lengths(num_draft, draft_tokens, target_probs.shape[-1])  # [B]
    argmax = argmax_first(target_probs)  # [B, L+1]
    match = (draft_tokens == argmax[:, :l]) & (jnp.arange(l)[None, :] < n[:, None])  # [B, L]
    tau = jnp.sum(jnp.cumprod(match.astype(jnp.int32), axis=-1), axis=-1).astype(jnp.int32)
    next_token = jnp.take_along_axis(argmax, tau[:, None], axis=-1)[:, 0]
    return VerifyResult(tau, next_token, jnp.zeros((b,), jnp.int32))
