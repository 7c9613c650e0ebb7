"""SpecInfer's recursive rejection sampling over a multi-path draft (ALGORITHMS.md §4.2, §4.3)."""

from __future__ import annotations

import jax.numpy as jnp

from specjax.typing import Array, PRNGKey
from specjax.verify.common import (
    VerifyResult,
    check_multipath_inputs,
    compute_dtype,
    normalize,
    take_token_prob,
    valid_lengths,
)
from specjax.verify.tree_walk import NodeRule, tree_walk


def dedupe_siblings(tokens: Array, candidates: Array) -> Array:
    """Keeps, among candidates with equal tokens, only the lowest path index. bool ``[B, K]``."""
    k = tokens.shape[-1]
    same = tokens[:, :, None] == tokens[:, None, :]  # [B, K, K]: path j vs path j'
    earlier = jnp.tril(jnp.ones((k, k), bool), -1)  # j' < j
    duplicate = jnp.any(same & candidates[:, None, :] & earlier[None], axis=-1)
    return candidates & ~duplicate


def rrs_rule(replacement: bool) -> NodeRule:
    """Recursive rejection sampling at one node, candidates tested in path-index order.

    With replacement (i.i.d. drafts) the residual sequence r_1 = p, r_{j+1} = norm(max(r_j - q,
    0)) does not depend on the drafted tokens; without replacement the draft law q' also loses
    each rejected token, and duplicated candidates (the same tree node) are tested once.
    """

    def rule(p, q, tokens, candidates, u):  # [B, V], [B, V], [B, K], [B, K], [B, K]
        if not replacement:
            candidates = dedupe_siblings(tokens, candidates)
        vocab = jnp.arange(p.shape[-1])[None, :]
        r, r_weights, q_cur = p, p, q  # residual law, its unnormalised weights, draft law
        accepted = jnp.zeros(tokens.shape[:1], bool)
        token = jnp.full(tokens.shape[:1], -1, jnp.int32)
        for j in range(tokens.shape[1]):
            x = tokens[:, j]
            consider = candidates[:, j] & ~accepted
            ok = u[:, j] * take_token_prob(q_cur, x) < take_token_prob(r, x)
            reject = (consider & ~ok)[:, None]
            accepted = accepted | (consider & ok)
            token = jnp.where(consider & ok, x, token)
            raw = jnp.maximum(r - q_cur, 0.0)  # [B, V]
            has_mass = jnp.sum(raw, axis=-1, keepdims=True) > 0.0
            r_weights = jnp.where(reject & has_mass, raw, r_weights)
            r = jnp.where(reject, normalize(raw, r), r)
            if not replacement:
                q_cur = jnp.where(
                    reject, normalize(jnp.where(vocab == x[:, None], 0.0, q_cur), q_cur), q_cur
                )
        return accepted, token.astype(jnp.int32), r_weights

    return rule


def specinfer_verify(
    key: PRNGKey,
    draft_tokens: Array,
    draft_probs: Array,
    target_probs: Array,
    *,
    num_draft: Array | None = None,
    replacement: bool = True,
) -> VerifyResult:
    """SpecInfer tree verification by recursive rejection sampling (RRS).

    Args:
      key: PRNG key (raw ``uint32[2]`` or typed).
      draft_tokens: int ``[B, K, L]`` draft paths (-1 = padding).
      draft_probs: ``[B, K, L, V]``; row (k, i) is the law token (k, i) was drawn from. Paths
        sharing a prefix carry identical rows for it.
      target_probs: ``[B, K, L+1, V]``; row (k, L) is the bonus distribution after path k.
      num_draft: optional int ``[B, K]`` valid tokens per path.
      replacement: True for i.i.d. paths; False when the children of every tree node were drawn
        without replacement, in order of first appearance along the path index.

    Returns:
      VerifyResult, each int32 ``[B]``; ``path`` is a path whose first tau tokens were accepted.
      K = 1 gives exactly :func:`token_verify`.
    """
    check_multipath_inputs("specinfer_verify", draft_tokens, draft_probs, target_probs, num_draft)
    dtype = compute_dtype(draft_probs, target_probs)
    n = valid_lengths(num_draft, draft_tokens, draft_probs.shape[-1])
    return tree_walk(
        key,
        draft_tokens,
        draft_probs.astype(dtype),
        target_probs.astype(dtype),
        n,
        rrs_rule(replacement),
    )
