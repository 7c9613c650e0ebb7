"""NumPy reference laws of the multi-draft tree walks: SpecInfer, SpecTr (docs/algorithms.md).

Each takes one path-major row ``draft_tokens [K, L]``, ``draft_probs [K, L, V]``,
``target_probs [K, L+1, V]`` (see :mod:`specjax.verify.reference` for the conventions).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specjax.verify.reference.common import (
    Law,
    accept_prob,
    add_outcome,
    multi_inputs,
    normalize_or,
)

NodeRule = Callable[[np.ndarray, np.ndarray, list[int]], tuple[dict[int, float], float, np.ndarray]]
"""Single-node multi-draft rule of a tree walk (see :func:`_tree_walk_law`)."""


def _tree_walk_law(
    tokens: np.ndarray, q: np.ndarray, p: np.ndarray, n: np.ndarray, node_rule: NodeRule
) -> Law:
    """Exact law of a depth-by-depth tree walk over path-major drafts (docs/algorithms.md).

    At depth ``d`` the alive paths (those whose first ``d`` tokens equal the accepted prefix)
    share the node rows ``p_d = p[j, d]``, ``q_d = q[j, d]`` (taken from the smallest alive
    ``j``). The candidates are the alive paths with ``d < n[j]`` and a token ``>= 0``, in
    increasing path index. ``node_rule(p_d, q_d, candidate_tokens)`` returns
    ``(accepted, none_prob, residual)``: the probability that the node accepts each token, the
    probability that it accepts none, and the law of the residual token drawn in that case. A
    residual draw stops the walk (tau = d, path = smallest alive index); an accepted token ``x``
    keeps the candidates whose token is ``x`` alive and moves to depth ``d + 1``. After ``L``
    accepted depths the bonus is drawn from ``p[j, L]``.
    """
    paths, length = tokens.shape
    law: Law = {}

    def walk(alive: list[int], d: int, weight: float) -> None:
        first = alive[0]
        if d == length:
            add_outcome(law, length, p[first, length], first, weight)
            return
        candidates = [j for j in alive if d < n[j] and tokens[j, d] >= 0]
        accepted, none_prob, residual = node_rule(
            p[first, d], q[first, d], [int(tokens[j, d]) for j in candidates]
        )
        add_outcome(law, d, residual, first, weight * none_prob)
        for x, prob in accepted.items():
            if weight * prob > 0:
                walk([j for j in candidates if tokens[j, d] == x], d + 1, weight * prob)

    walk(list(range(paths)), 0, 1.0)
    return law


def _rrs_with_replacement(
    p_d: np.ndarray, q_d: np.ndarray, candidates: list[int]
) -> tuple[dict[int, float], float, np.ndarray]:
    """SpecInfer recursive rejection sampling with replacement at one node."""
    accepted: dict[int, float] = {}
    reach = 1.0  # P(all earlier candidates rejected)
    r = p_d
    for x in candidates:
        accept = accept_prob(r[x], q_d[x])
        accepted[x] = accepted.get(x, 0.0) + reach * accept
        reach *= 1.0 - accept
        r = normalize_or(np.maximum(r - q_d, 0.0), r)  # only used if x was rejected
    return accepted, reach, r


def _rrs_without_replacement(
    p_d: np.ndarray, q_d: np.ndarray, candidates: list[int]
) -> tuple[dict[int, float], float, np.ndarray]:
    """Recursive rejection sampling without replacement at one node.

    Candidates with the same token are one tree node: only the first occurrence is tested.
    """
    unique: list[int] = []
    for x in candidates:
        if x not in unique:
            unique.append(x)
    accepted: dict[int, float] = {}
    reach = 1.0
    r, q_left = p_d, q_d
    for x in unique:
        accept = accept_prob(r[x], q_left[x])
        accepted[x] = reach * accept
        reach *= 1.0 - accept
        r = normalize_or(np.maximum(r - q_left, 0.0), r)
        without_x = q_left.copy()
        without_x[x] = 0.0
        q_left = normalize_or(without_x, q_left)
    return accepted, reach, r


def spectr_rho(p, q, k: int) -> float:
    """Returns SpecTr's ρ* for target ``p``, draft ``q`` and ``k`` i.i.d. drafts.

    With ``β(ρ) = Σ_v min(q(v), p(v)/ρ)`` and ``p_acc(ρ) = 1 - (1 - β)^k``, ρ* is the smallest
    ``ρ`` in ``[1, k]`` with ``p_acc(ρ) <= ρ β(ρ)`` (the root of ``p_acc/β = ρ``; the validity
    condition of the residual). ``p_acc(ρ) - ρ β(ρ)`` is non-increasing in ρ (``β`` decreases,
    ``ρ β(ρ) = Σ min(ρ q, p)`` increases), is ``>= 0`` at 1 and ``<= 0`` at ``k``, so bisection
    finds ρ* to float64 resolution. ρ* = 1 for ``k <= 1``.
    """
    if k <= 1:
        return 1.0
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)

    def excess(rho: float) -> float:
        beta = np.minimum(q, p / rho).sum()
        return 1.0 - (1.0 - beta) ** k - rho * beta

    lo, hi = 1.0, float(k)
    if excess(lo) <= 0:
        return 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        if excess(mid) <= 0:
            hi = mid
        else:
            lo = mid
    return hi


def _k_seq(
    p_d: np.ndarray, q_d: np.ndarray, candidates: list[int]
) -> tuple[dict[int, float], float, np.ndarray]:
    """SpecTr k-sequential selection at one node."""
    k = len(candidates)
    if k == 0:
        return {}, 1.0, p_d
    rho = spectr_rho(p_d, q_d, k)
    capped = np.minimum(q_d, p_d / rho)
    beta = capped.sum()
    p_acc = 1.0 - (1.0 - beta) ** k
    if k == 1:
        factor = 1.0
    else:
        factor = p_acc / beta if beta > 0 else 0.0
    accepted: dict[int, float] = {}
    reach = 1.0
    for x in candidates:
        accept = accept_prob(p_d[x], rho * q_d[x])
        accepted[x] = accepted.get(x, 0.0) + reach * accept
        reach *= 1.0 - accept
    residual = normalize_or(np.maximum(p_d - capped * factor, 0.0), p_d)
    return accepted, reach, residual


def specinfer_law(
    draft_tokens, draft_probs, target_probs, num_draft=None, replacement: bool = True
) -> Law:
    """SpecInfer tree verification: recursive rejection sampling at every node.

    Args:
      draft_tokens: ``[K, L]`` int, path-major, pads ``-1``.
      draft_probs: ``[K, L, V]``; paths sharing a node carry identical rows.
      target_probs: ``[K, L+1, V]``.
      num_draft: valid tokens per path (int or ``[K]``; default ``L``).
      replacement: True for siblings drawn i.i.d., False for siblings drawn without
        replacement in path-index order (candidates with equal tokens are deduplicated).

    Returns:
      The exact outcome law.
    """
    tokens, q, p, n = multi_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    rule = _rrs_with_replacement if replacement else _rrs_without_replacement
    return _tree_walk_law(tokens, q, p, n, rule)


def spectr_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """SpecTr tree verification: k-SEQ at every node with ρ*.

    Args:
      draft_tokens: ``[K, L]`` int, path-major i.i.d. paths, pads ``-1``.
      draft_probs: ``[K, L, V]``.
      target_probs: ``[K, L+1, V]``.
      num_draft: valid tokens per path (int or ``[K]``; default ``L``).

    Returns:
      The exact outcome law.
    """
    tokens, q, p, n = multi_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    return _tree_walk_law(tokens, q, p, n, _k_seq)
