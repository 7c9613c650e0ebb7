"""SpecInfer's recursive rejection sampling over a multi-path draft (docs/algorithms.md)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from specjax.typing import Array, PRNGKey
from specjax.verify.common import (
    VerifyResult,
    check_multipath_inputs,
    compute_dtype,
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

    The laws are kept unnormalised with ``[B]`` normalisers (r = W / s, q' = Q / t), so a
    rejection costs one fused pass over V (the new weights and their mass) instead of
    normalising whole rows: ``max(r - q', 0) = max(W - (s / t) Q, 0) / s`` and the test
    ``u q'(x) < r(x)`` is ``u Q(x) s < W(x) t``. With replacement the residual weights after
    any number of rejections are ``W = max(p - c q, 0)`` for one scalar c per row (c = 0, then
    c <- c + s at each rejection), so a candidate costs one fused reduction over p and q and
    W is written once, by the walk, for the node it stops at (the state is c). The first
    candidate sees s = t = 1 and c = 0 exactly, so K = 1 is token verification bit for bit.
    Without replacement the state is W itself.
    """
    if replacement:
        return NodeRule(rrs_iid, iid_residual)

    def decide(p, q, tokens, candidates, u):  # [B, V], [B, V], [B, K], [B, K], [B, K]
        candidates = dedupe_siblings(tokens, candidates)
        vocab = jnp.arange(p.shape[-1])[None, :]

        def candidate(carry, xs):  # one sibling tested
            w, s, big_q, t, accepted, token = carry
            x, consider, u_j = xs  # [B] each
            consider = consider & ~accepted
            ok = u_j * take_token_prob(big_q, x) * s < take_token_prob(w, x) * t
            reject = consider & ~ok
            accepted = accepted | (consider & ok)
            token = jnp.where(consider & ok, x, token)
            raw = jnp.maximum(w - (s / t)[:, None] * big_q, 0.0)  # [B, V], s * max(r - q', 0)
            mass = jnp.sum(raw, axis=-1)  # [B]
            moved = reject & (mass > 0.0)  # an empty residual (float drift) keeps r
            w, s = jnp.where(moved[:, None], raw, w), jnp.where(moved, mass, s)
            left = jnp.where(vocab == x[:, None], 0.0, big_q)
            left_mass = jnp.sum(left, axis=-1)
            kept = reject & (left_mass > 0.0)  # q' without x, unless that leaves no mass
            big_q = jnp.where(kept[:, None], left, big_q)
            t = jnp.where(kept, left_mass, t)
            return (w, s, big_q, t, accepted, token), None

        b = tokens.shape[0]
        one = jnp.ones((b,), p.dtype)
        # r = w / s is the residual law (w is also what a rejecting node samples from) and
        # q' = big_q / t the draft law.
        carry = (p, one, q, one, jnp.zeros((b,), bool), jnp.full((b,), -1, jnp.int32))
        w, _, _, _, accepted, token = siblings(candidate, carry, tokens, candidates, u)
        return accepted, token, w

    return NodeRule(decide, lambda p, q, w: w)


def rrs_iid(p, q, tokens, candidates, u):  # [B, V], [B, V], [B, K], [B, K], [B, K]
    """:func:`rrs_rule`'s decision with replacement: the state is c ``[B]``
    (:func:`iid_residual`), the residual's mass s."""

    def candidate(carry, xs):  # one sibling tested
        c, s, accepted, token = carry
        x, consider, u_j = xs  # [B] each
        consider = consider & ~accepted
        q_x = take_token_prob(q, x)
        w_x = jnp.maximum(take_token_prob(p, x) - c * q_x, 0.0)
        ok = u_j * q_x * s < w_x
        reject = consider & ~ok
        accepted = accepted | (consider & ok)
        token = jnp.where(consider & ok, x, token)
        c_next = c + s
        mass = jnp.sum(jnp.maximum(p - c_next[:, None] * q, 0.0), axis=-1)  # [B]
        moved = reject & (mass > 0.0)  # an empty residual (float drift) keeps r
        return (jnp.where(moved, c_next, c), jnp.where(moved, mass, s), accepted, token), None

    b = tokens.shape[0]
    zero = jnp.zeros((b,), p.dtype)
    carry = (zero, zero + 1.0, jnp.zeros((b,), bool), jnp.full((b,), -1, jnp.int32))
    c, _, accepted, token = siblings(candidate, carry, tokens, candidates, u)
    return accepted, token, c


def siblings(candidate, carry, tokens: Array, candidates: Array, u: Array):
    """``carry`` after ``candidate(carry, (x [B], consider [B], u_j [B]))`` for each of the K
    siblings (``tokens``, ``candidates``, ``u`` ``[B, K]``) in path order, unrolled (K is
    static and small: a loop inside a decode step splits its GPU graph), each after the first
    under a ``lax.cond`` that skips it where no row considers it (every row's carry would stay
    as it is; ``accepted`` is ``carry[-2]``). The conditional materialises the carry, as the
    loop's did: unrolled without one, XLA fused every earlier sibling's decisions into the
    next one's passes over V."""
    one = lambda j, c: candidate(c, (tokens[:, j], candidates[:, j], u[:, j]))[0]
    carry = one(0, carry)
    for j in range(1, tokens.shape[-1]):
        idle = ~jnp.any(candidates[:, j] & ~carry[-2])
        carry = jax.lax.cond(idle, lambda c: c, functools.partial(one, j), carry)
    return carry


def iid_residual(p: Array, q: Array, c: Array) -> Array:
    """The residual weights ``max(p - c q, 0)`` ``[B, V]`` of :func:`rrs_iid`'s state c ``[B]``."""
    return jnp.maximum(p - c[:, None] * q, 0.0)


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
      key: PRNG key (raw ``uint32[2]`` or typed), or one per row (``[B]``: row b as if
        verified alone with ``key[b]``).
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
    if not isinstance(replacement, bool):
        raise TypeError(f"specinfer_verify: replacement must be True or False, got {replacement!r}")
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
