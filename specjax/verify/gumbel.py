"""Drafter-invariant speculative sampling (Daliri, Musco & Suresh, "Coupling without
Communication and Drafter-Invariant Speculative Decoding", arXiv 2408.07978), one draft chain.

The target's token at absolute position n of a row is ``argmax_v log p_n(v) + G_n(v)``, with
``G_n`` Gumbel(0, 1) noise drawn from the row's noise key and n alone (:func:`gumbel_noise`):
the Gumbel-max trick, so the token has exactly the law ``p_n``. It is computed as the equivalent
exponential race ``argmax_v p_n(v) · W_n(v)``, ``W = exp(G)``, a product instead of a log of
every target entry. A draft token is accepted while
it equals the target's token at its position; the first that does not is replaced by the
target's, or, all accepted, the target's token after them is the bonus. Every token that comes
out is the target's Gumbel-max draw at its position, so the output is the autoregressive sample
of those keys, token for token, whatever the drafter, its width or the row's place in a batch:
the rule is exact for any draft, which need not even state its law (it is read only to end a
path at a law that is not a probability vector, as in every verifier).

A drafter that draws its token at position n with the same noise (``argmax log q_n + G_n``)
agrees with the target with probability at least (1 - TV(p, q)) / (1 + TV(p, q)) (the paper's
Theorem 2), against 1 - TV for token verification: the price of invariance.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.typing import Array, PRNGKey
from specjax.verify.common import (
    VerifyResult,
    argmax_product,
    check_chain_inputs,
    cut_at,
    invalid_laws,
    valid_lengths,
)


def gumbel_noise(keys: PRNGKey, positions: Array, vocab: int) -> Array:
    """float32 ``[B, T, V]`` the noise of row b at absolute position ``positions[b, t]``, drawn
    from ``fold_in(keys[b], position)`` alone (the same wherever and whenever it is drawn), as
    exponential-race weights ``W = 1 / E``, ``E ~ Exp(1)``: ``log W`` is Gumbel(0, 1) noise, so
    ``argmax p · W`` is the Gumbel-max draw ``argmax log p + G``, without a log of every ``p``."""

    def one(key, position):
        e = jax.random.exponential(jax.random.fold_in(key, position), (vocab,), jnp.float32)
        return 1.0 / jnp.maximum(e, 1e-30)  # (E = 0 when the uniform draw is 0: W stays finite)

    return jax.vmap(jax.vmap(one, (None, 0)))(keys, positions.astype(jnp.uint32))


def gumbel_max(probs: Array, noise: Array) -> Array:
    """int32 ``[...]``: ``argmax probs · noise`` over the last axis, a sample of ``probs [..., V]``
    given its race weights ``noise [..., V]`` (:func:`gumbel_noise`; a token of zero probability
    never wins): ``P(a) = p_a``, since ``p_v / E_v`` is an exponential race."""
    return argmax_product(probs, noise)


def coupled_acceptance(target_probs: Array, draft_probs: Array) -> Array:
    """float32 ``[...]``: the probability that the Gumbel-max draws of ``target_probs`` and
    ``draft_probs`` (``[..., V]``) with the same noise agree, i.e. that ``gumbel`` accepts a
    coupled draft token: ``sum_a 1 / sum_v max(p_v / p_a, q_v / q_a)`` (exponential races; at
    least ``(1 - TV) / (1 + TV)``, at most ``1 - TV``).

    For a, the tokens with ``p_v / q_v >= p_a / q_a`` contribute ``p_v / p_a``, the others
    ``q_v / q_a``: one sort by that ratio and two cumulative sums, O(V log V) per row.
    """
    p = target_probs.astype(jnp.float32)
    q = draft_probs.astype(jnp.float32)
    ratio = jnp.where(q > 0, p / jnp.where(q > 0, q, 1.0), jnp.where(p > 0, jnp.inf, 0.0))
    order = jnp.argsort(ratio, axis=-1)
    p_s = jnp.take_along_axis(p, order, axis=-1)
    q_s = jnp.take_along_axis(q, order, axis=-1)
    p_from = jnp.flip(jnp.cumsum(jnp.flip(p_s, -1), -1), -1)  # sum of p at ratios >= a's
    q_before = jnp.cumsum(q_s, -1) - q_s  # sum of q at ratios < a's
    both = (p_s > 0) & (q_s > 0)
    denom = jnp.where(
        both, p_from / jnp.where(both, p_s, 1.0) + q_before / jnp.where(both, q_s, 1.0), 1.0
    )
    return jnp.sum(jnp.where(both, 1.0 / denom, 0.0), axis=-1)


def gumbel_verify(
    noise: Array,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    *,
    num_draft: Array | None = None,
) -> VerifyResult:
    """Accepts the longest draft prefix equal to the target's Gumbel-max tokens, then emits the
    target's token after it.

    Args:
      noise: float ``[B, L+1, V]`` the race weights ``exp(G)`` of the positions of draft tokens
        0 .. L - 1 and of the bonus (:func:`gumbel_noise` of the row's noise key): in place of
        the other verifiers' key, since the draws belong to positions, not to steps.
      draft_tokens: int ``[B, L]`` (-1 = padding, never accepted).
      draft_probs: ``[B, L, V]``, read only to end a path at a law that is not a probability
        vector.
      target_probs: ``[B, L+1, V]``; row L is the bonus law.
      num_draft: optional int ``[B]`` valid draft tokens per row.

    Returns:
      VerifyResult: ``num_accepted`` tau, ``next_token`` the target's token at position tau,
      ``path`` 0 (each int32 ``[B]``).
    """
    b, l, v = check_chain_inputs(
        "gumbel_verify", draft_tokens, draft_probs, target_probs, num_draft
    )
    if tuple(noise.shape) != (b, l + 1, v):
        raise ValueError(
            f"gumbel_verify: noise must be [B, L+1, V] = {[b, l + 1, v]}, got {list(noise.shape)}"
        )
    n = valid_lengths(cut_at(invalid_laws(draft_probs), num_draft), draft_tokens, v)  # [B]
    target = gumbel_max(target_probs.astype(jnp.float32), noise)  # [B, L+1]
    match = (draft_tokens == target[:, :l]) & (jnp.arange(l)[None, :] < n[:, None])  # [B, L]
    tau = jnp.sum(jnp.cumprod(match.astype(jnp.int32), axis=-1), axis=-1).astype(jnp.int32)
    next_token = jnp.take_along_axis(target, tau[:, None], axis=-1)[:, 0]
    return VerifyResult(tau, next_token, jnp.zeros((b,), jnp.int32))
