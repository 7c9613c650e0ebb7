"""Slow, obviously-correct NumPy references of every verifier, as exact outcome laws.

Each ``*_law`` function takes ONE row (no batch dimension) of the verifier's inputs and returns
the exact probability law of its outcome as a dict ``{(tau, next_token, path): probability}``
holding only outcomes of positive probability. ``tau`` is the number of accepted draft tokens,
``next_token`` the correction (``tau < n``) or bonus (``tau == n``) token and ``path`` the draft
path followed (0 for chain verifiers). Everything is float64 and written for clarity, not speed:
these functions are the oracles that the jitted verifiers and the exact-enumeration tests
(``tests/enumeration.py``) are checked against. The algorithms are specified in
``ALGORITHMS.md`` (token §1, greedy §2, block §3, specinfer §4.2/§4.3, spectr §4.4, gbv §6).

Input layouts (q = draft, p = target):

* chain: ``draft_tokens [L]``, ``draft_probs [L, V]``, ``target_probs [L+1, V]``,
  ``num_draft`` an int ``n <= L`` (default ``L``);
* multi-path (path-major): ``draft_tokens [K, L]``, ``draft_probs [K, L, V]``,
  ``target_probs [K, L+1, V]``, ``num_draft`` an int or ``[K]`` (default ``L`` for every path).

Shared conventions: pad draft tokens are ``-1`` and end the draft (``n`` is cut at the first
one); nothing at an index ``>= n`` is accepted; when every valid token is accepted
(``tau == n``) the next token is drawn from the target row ``n`` of the path followed.

Only numpy and the standard library are imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# The oracle's brute force (all 2^V subsets, exact draft-tuple laws) lives beside this module.
from specjax.verify.optimal_reference import (  # noqa: F401 (re-exported)
    draft_tuple_law,
    optimal_acceptance_bruteforce,
)

Outcome = tuple[int, int, int]
"""``(tau, next_token, path)``."""

Law = dict[Outcome, float]
"""Exact law of a verifier's outcome: outcome -> probability (positive entries only)."""

NodeRule = Callable[[np.ndarray, np.ndarray, list[int]], tuple[dict[int, float], float, np.ndarray]]
"""Single-node multi-draft rule of a tree walk (see :func:`_tree_walk_law`)."""


# --------------------------------------------------------------------------------------------
# Small helpers.
# --------------------------------------------------------------------------------------------


def _normalize_or(x: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Returns ``x / sum(x)``, or ``fallback`` when ``x`` has no positive mass."""
    total = x.sum()
    if total > 0:
        return x / total
    return fallback


def _accept_prob(numerator: float, denominator: float) -> float:
    """Returns ``min(1, numerator / denominator)`` with the conventions for zeros.

    ``numerator <= 0`` gives 0 (a token the target cannot produce is never accepted), otherwise
    ``denominator <= 0`` gives 1 (the ratio is +inf).
    """
    if numerator <= 0:
        return 0.0
    if denominator <= 0:
        return 1.0
    return min(1.0, numerator / denominator)


def add_outcome(law: Law, tau: int, dist: np.ndarray, path: int, weight: float) -> None:
    """Adds ``weight * dist[v]`` to outcome ``(tau, v, path)`` for every ``v`` (positive only)."""
    for v in range(dist.shape[0]):
        prob = weight * float(dist[v])
        if prob > 0:
            key = (int(tau), int(v), int(path))
            law[key] = law.get(key, 0.0) + prob


def _first_pad(tokens: np.ndarray) -> int:
    """Index of the first padding token (-1) of a path, or its length: a draft ends there."""
    pads = np.flatnonzero(tokens < 0)
    return int(pads[0]) if pads.size else len(tokens)


def _chain_inputs(
    draft_tokens, draft_probs, target_probs, num_draft
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Validates one chain row; returns ``(tokens [L], q [L, V], p [L+1, V], n)``."""
    tokens = np.asarray(draft_tokens, dtype=np.int64)
    q = np.asarray(draft_probs, dtype=np.float64)
    p = np.asarray(target_probs, dtype=np.float64)
    if tokens.ndim != 1:
        raise ValueError(f"chain draft_tokens must be [L], got shape {tokens.shape}")
    length = tokens.shape[0]
    vocab = p.shape[-1]
    if q.shape != (length, vocab) or p.shape != (length + 1, vocab):
        raise ValueError(
            f"expected draft_probs [{length}, V] and target_probs [{length + 1}, V], "
            f"got {q.shape} and {p.shape}"
        )
    n = length if num_draft is None else int(num_draft)
    if not 0 <= n <= length:
        raise ValueError(f"num_draft must be in [0, {length}], got {n}")
    return tokens, q, p, min(n, _first_pad(tokens))


def _multi_inputs(
    draft_tokens, draft_probs, target_probs, num_draft
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validates one multi-path row.

    Returns:
      ``(tokens [K, L], q [K, L, V], p [K, L+1, V], n [K])``.
    """
    tokens = np.asarray(draft_tokens, dtype=np.int64)
    q = np.asarray(draft_probs, dtype=np.float64)
    p = np.asarray(target_probs, dtype=np.float64)
    if tokens.ndim != 2:
        raise ValueError(f"multi-path draft_tokens must be [K, L], got shape {tokens.shape}")
    paths, length = tokens.shape
    vocab = p.shape[-1]
    if q.shape != (paths, length, vocab) or p.shape != (paths, length + 1, vocab):
        raise ValueError(
            f"expected draft_probs [{paths}, {length}, V] and target_probs "
            f"[{paths}, {length + 1}, V], got {q.shape} and {p.shape}"
        )
    if num_draft is None:
        n = np.full(paths, length, dtype=np.int64)
    else:
        n = np.broadcast_to(np.asarray(num_draft, dtype=np.int64), (paths,)).copy()
    if np.any(n < 0) or np.any(n > length):
        raise ValueError(f"num_draft must be in [0, {length}], got {n}")
    return tokens, q, p, np.minimum(n, [_first_pad(row) for row in tokens])


def expected_accepted(law: Law) -> float:
    """Returns E[tau] under an outcome law (block efficiency is this plus one)."""
    return sum(prob * tau for (tau, _, _), prob in law.items())


# --------------------------------------------------------------------------------------------
# Chain verifiers.
# --------------------------------------------------------------------------------------------


def greedy_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """Greedy verification (ALGORITHMS §2): accept while the draft equals the target argmax.

    ``a_i = argmax p_i`` (first maximal index). The outcome is deterministic: tau = number of
    leading valid tokens equal to ``a_i``, next token ``a_tau``.

    Args:
      draft_tokens: ``[L]`` int, pads ``-1``.
      draft_probs: ``[L, V]`` (unused; kept for a uniform signature).
      target_probs: ``[L+1, V]``.
      num_draft: valid draft tokens ``n`` (default ``L``).

    Returns:
      ``{(tau, argmax p_tau, 0): 1.0}``.
    """
    tokens, _, p, n = _chain_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    tau = 0
    while tau < n and tokens[tau] == int(np.argmax(p[tau])):
        tau += 1
    return {(tau, int(np.argmax(p[tau])), 0): 1.0}


def token_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """Standard token-level speculative sampling (ALGORITHMS §1).

    Token ``i`` (0-based) is accepted w.p. ``min(1, p_i(x_i) / q_i(x_i))``; the first rejection
    stops the walk and the correction is drawn from ``normalize(max(p_tau - q_tau, 0))``
    (``p_tau`` if that has no mass). If all ``n`` valid tokens are accepted the bonus is drawn
    from ``p_n``.

    Args:
      draft_tokens: ``[L]`` int, pads ``-1``.
      draft_probs: ``[L, V]``, row ``i`` is the law ``x_i`` was drawn from.
      target_probs: ``[L+1, V]``.
      num_draft: valid draft tokens ``n`` (default ``L``).

    Returns:
      The exact outcome law.
    """
    tokens, q, p, n = _chain_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    law: Law = {}
    reach = 1.0  # P(tokens 0..i-1 all accepted)
    for i in range(n):
        x = int(tokens[i])
        accept = 0.0 if x < 0 else _accept_prob(p[i, x], q[i, x])
        residual = _normalize_or(np.maximum(p[i] - q[i], 0.0), p[i])
        add_outcome(law, i, residual, 0, reach * (1.0 - accept))
        reach *= accept
    add_outcome(law, n, p[n], 0, reach)
    return law


def block_weights_and_stops(
    draft_tokens, draft_probs, target_probs, num_draft=None
) -> tuple[np.ndarray, np.ndarray]:
    """Block verification weights ``w`` and stop probabilities ``h`` (ALGORITHMS §3).

    Sequential recurrence: ``w_0 = 1``, ``w_i = min(w_{i-1} p(x_i) / q(x_i), 1)`` using 0-based
    rows ``i-1`` (a pad token or ``p(x_i) = 0`` gives ``w_i = 0``; ``q(x_i) = 0 < p(x_i)``
    gives ``w_i = 1``). For ``i < n``: ``r_i = max(w_i p_i - q_i, 0)`` with 0-based rows ``i``,
    ``Z_i = sum(r_i)``, ``h_i = Z_i / (Z_i + 1 - w_i)`` (1 if that denominator is ``<= 0``);
    ``h_n = w_n``.

    Args:
      draft_tokens: ``[L]`` int, pads ``-1``.
      draft_probs: ``[L, V]``.
      target_probs: ``[L+1, V]``.
      num_draft: valid draft tokens ``n`` (default ``L``).

    Returns:
      ``(w [n+1], h [n+1])``.
    """
    tokens, q, p, n = _chain_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    w = np.empty(n + 1)
    w[0] = 1.0
    for i in range(1, n + 1):
        x = int(tokens[i - 1])
        if x < 0 or p[i - 1, x] <= 0:
            w[i] = 0.0
        elif q[i - 1, x] <= 0:
            w[i] = 1.0
        else:
            w[i] = min(w[i - 1] * p[i - 1, x] / q[i - 1, x], 1.0)
    h = np.empty(n + 1)
    for i in range(n):
        z = np.maximum(w[i] * p[i] - q[i], 0.0).sum()
        denominator = z + 1.0 - w[i]
        h[i] = z / denominator if denominator > 0 else 1.0
    h[n] = w[n]
    return w, h


def block_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """Block verification (ALGORITHMS §3), "last success wins".

    ``P(tau = i) = h_i * prod_{j=i+1..n} (1 - h_j)`` with ``w, h`` from
    :func:`block_weights_and_stops`. For ``tau < n`` the correction is drawn from
    ``normalize(max(w_tau p_tau - q_tau, 0))`` (0-based rows ``tau``; ``p_tau`` if no mass);
    for ``tau == n`` from ``p_n``.

    Args:
      draft_tokens: ``[L]`` int, pads ``-1``.
      draft_probs: ``[L, V]``.
      target_probs: ``[L+1, V]``.
      num_draft: valid draft tokens ``n`` (default ``L``).

    Returns:
      The exact outcome law.
    """
    _, q, p, n = _chain_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    w, h = block_weights_and_stops(draft_tokens, draft_probs, target_probs, num_draft)
    law: Law = {}
    for i in range(n + 1):
        prob_tau = h[i] * np.prod(1.0 - h[i + 1 :])
        if i < n:
            dist = _normalize_or(np.maximum(w[i] * p[i] - q[i], 0.0), p[i])
        else:
            dist = p[n]
        add_outcome(law, i, dist, 0, float(prob_tau))
    return law


# --------------------------------------------------------------------------------------------
# Multi-path tree walks (SpecInfer, SpecTr).
# --------------------------------------------------------------------------------------------


def _tree_walk_law(
    tokens: np.ndarray, q: np.ndarray, p: np.ndarray, n: np.ndarray, node_rule: NodeRule
) -> Law:
    """Exact law of a depth-by-depth tree walk over path-major drafts (ALGORITHMS §4.4).

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
    """SpecInfer recursive rejection sampling with replacement at one node (§4.2)."""
    accepted: dict[int, float] = {}
    reach = 1.0  # P(all earlier candidates rejected)
    r = p_d
    for x in candidates:
        accept = _accept_prob(r[x], q_d[x])
        accepted[x] = accepted.get(x, 0.0) + reach * accept
        reach *= 1.0 - accept
        r = _normalize_or(np.maximum(r - q_d, 0.0), r)  # only used if x was rejected
    return accepted, reach, r


def _rrs_without_replacement(
    p_d: np.ndarray, q_d: np.ndarray, candidates: list[int]
) -> tuple[dict[int, float], float, np.ndarray]:
    """Recursive rejection sampling without replacement at one node (§4.3).

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
        accept = _accept_prob(r[x], q_left[x])
        accepted[x] = reach * accept
        reach *= 1.0 - accept
        r = _normalize_or(np.maximum(r - q_left, 0.0), r)
        without_x = q_left.copy()
        without_x[x] = 0.0
        q_left = _normalize_or(without_x, q_left)
    return accepted, reach, r


def spectr_rho(p, q, k: int) -> float:
    """Returns SpecTr's ρ* for target ``p``, draft ``q`` and ``k`` i.i.d. drafts (§4.4).

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
    """SpecTr k-sequential selection at one node (§4.4)."""
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
        accept = _accept_prob(p_d[x], rho * q_d[x])
        accepted[x] = accepted.get(x, 0.0) + reach * accept
        reach *= 1.0 - accept
    residual = _normalize_or(np.maximum(p_d - capped * factor, 0.0), p_d)
    return accepted, reach, residual


def specinfer_law(
    draft_tokens, draft_probs, target_probs, num_draft=None, replacement: bool = True
) -> Law:
    """SpecInfer tree verification: recursive rejection sampling at every node (§4.2, §4.3).

    Args:
      draft_tokens: ``[K, L]`` int, path-major, pads ``-1``.
      draft_probs: ``[K, L, V]``; paths sharing a node carry identical rows.
      target_probs: ``[K, L+1, V]``.
      num_draft: valid tokens per path (int or ``[K]``; default ``L``).
      replacement: True for siblings drawn i.i.d. (§4.2), False for siblings drawn without
        replacement in path-index order (§4.3; candidates with equal tokens are deduplicated).

    Returns:
      The exact outcome law.
    """
    tokens, q, p, n = _multi_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    rule = _rrs_with_replacement if replacement else _rrs_without_replacement
    return _tree_walk_law(tokens, q, p, n, rule)


def spectr_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """SpecTr tree verification: k-SEQ at every node with ρ* (§4.4).

    Args:
      draft_tokens: ``[K, L]`` int, path-major i.i.d. paths, pads ``-1``.
      draft_probs: ``[K, L, V]``.
      target_probs: ``[K, L+1, V]``.
      num_draft: valid tokens per path (int or ``[K]``; default ``L``).

    Returns:
      The exact outcome law.
    """
    tokens, q, p, n = _multi_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    return _tree_walk_law(tokens, q, p, n, _k_seq)


# --------------------------------------------------------------------------------------------
# Greedy multi-path block verification.
# --------------------------------------------------------------------------------------------


def _gbv_keys(p_d: np.ndarray, q_d: np.ndarray) -> np.ndarray:
    """Unclipped ranking keys κ = p/q (``q = 0 < p`` -> +inf, ``p = q = 0`` -> 0)."""
    keys = np.zeros_like(p_d)
    for v in range(p_d.shape[0]):
        if p_d[v] <= 0:
            keys[v] = 0.0
        elif q_d[v] <= 0:
            keys[v] = np.inf
        else:
            keys[v] = p_d[v] / q_d[v]
    return keys


def gbv_select(
    draft_tokens, draft_probs, target_probs, num_draft=None
) -> tuple[int, int, np.ndarray]:
    """GBV path selection and skewed draft rows (ALGORITHMS §6, conventions §0.5).

    Greedy walk: at depth ``d`` the candidates are the alive paths with ``d < n[j]`` (and a
    token ``>= 0``); the token maximal in ``(κ_d(x), x)`` is chosen and the candidates carrying
    it stay alive; the walk ends at the first depth without candidates. The skewed draft row at
    each chosen depth is the law of the next token of the maximum of K i.i.d. paths given that
    the maximum passes through the current node:
    ``q_skew(x) ∝ (A + y(x) + z(x))^K - (A + y(x))^K``, computed through the identity
    ``a^K - b^K = (a - b) Σ_{i<K} a^i b^{K-1-i}`` with ``a - b = z`` (no cancellation).

    Args:
      draft_tokens: ``[K, L]`` int, path-major i.i.d. paths, pads ``-1``.
      draft_probs: ``[K, L, V]``.
      target_probs: ``[K, L+1, V]``.
      num_draft: valid tokens per path (int or ``[K]``; default ``L``).

    Returns:
      ``(path, n_sel, q_skew [L, V])``: the selected path (smallest alive index), the number of
      chosen depths and its skewed draft rows (rows ``d >= n_sel`` are the plain draft rows of
      the selected path; with ``K == 1`` every row is the plain draft row).
    """
    tokens, q, p, n = _multi_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    paths, length = tokens.shape
    vocab = q.shape[-1]

    alive = list(range(paths))
    chosen: list[int] = []
    for d in range(length):
        candidates = [j for j in alive if d < n[j] and tokens[j, d] >= 0]
        if not candidates:
            break
        keys = _gbv_keys(p[alive[0], d], q[alive[0], d])
        best = max({int(tokens[j, d]) for j in candidates}, key=lambda x: (keys[x], x))
        alive = [j for j in candidates if tokens[j, d] == best]
        chosen.append(best)
    path, n_sel = alive[0], len(chosen)

    q_skew = q[path].copy()
    if paths == 1:
        return path, n_sel, q_skew
    cum_below = 1.0  # F(v): P(one path's prefix <= v lexicographically)
    through = 1.0  # qj(v): P(one path passes through v)
    for d in range(n_sel):
        q_d = q[path, d]
        keys = _gbv_keys(p[path, d], q_d)
        order = np.lexsort((np.arange(vocab), keys))  # ascending by (κ, token)
        cdf = np.empty(vocab)
        cdf[order] = np.cumsum(q_d[order])  # mass ranked at or below each token
        a = cum_below - through
        y = through * (cdf - q_d)
        z = through * q_d
        power_sum = sum((a + y + z) ** i * (a + y) ** (paths - 1 - i) for i in range(paths))
        q_skew[d] = _normalize_or(z * power_sum, q_d)
        t = chosen[d]
        cum_below = a + through * cdf[t]
        through = through * q_d[t]
    return path, n_sel, q_skew


def gbv_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """Greedy multi-path block verification (ALGORITHMS §6).

    Block verification (:func:`block_law`) of the path chosen by :func:`gbv_select`, with its
    draft rows replaced by ``q_skew`` and ``num_draft = n_sel``.

    Args:
      draft_tokens: ``[K, L]`` int, path-major i.i.d. paths, pads ``-1``.
      draft_probs: ``[K, L, V]``.
      target_probs: ``[K, L+1, V]``.
      num_draft: valid tokens per path (int or ``[K]``; default ``L``).

    Returns:
      The exact outcome law (every outcome has the selected path).
    """
    tokens, _, p, _ = _multi_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    path, n_sel, q_skew = gbv_select(draft_tokens, draft_probs, target_probs, num_draft)
    chain = block_law(tokens[path], q_skew, p[path], num_draft=n_sel)
    return {(tau, nxt, path): prob for (tau, nxt, _), prob in chain.items()}


# --------------------------------------------------------------------------------------------
# Registry.
# --------------------------------------------------------------------------------------------

LAWS: dict[str, Callable[..., Law]] = {
    "greedy": greedy_law,
    "token": token_law,
    "block": block_law,
    "specinfer": specinfer_law,
    "spectr": spectr_law,
    "gbv": gbv_law,
}
"""Reference law of every verifier, by registry name."""

CHAIN_LAWS: Sequence[str] = ("greedy", "token", "block")
"""Names whose laws take chain ``[L]`` inputs; the others take multi-path ``[K, L]`` inputs."""


def law(name: str, draft_tokens, draft_probs, target_probs, num_draft=None, **kwargs) -> Law:
    """Returns the exact outcome law of verifier ``name`` on one row.

    Args:
      name: a key of :data:`LAWS`.
      draft_tokens: ``[L]`` for chain verifiers, ``[K, L]`` for multi-path ones.
      draft_probs: ``[L, V]`` or ``[K, L, V]``.
      target_probs: ``[L+1, V]`` or ``[K, L+1, V]``.
      num_draft: valid draft tokens (int, or int / ``[K]`` for multi-path).
      **kwargs: extra options of the verifier (``replacement`` for ``specinfer``).

    Raises:
      ValueError: for an unknown name.
    """
    if name not in LAWS:
        raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(sorted(LAWS))}")
    return LAWS[name](draft_tokens, draft_probs, target_probs, num_draft, **kwargs)
