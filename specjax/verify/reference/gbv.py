"""NumPy reference of greedy multi-path block verification (GBV, docs/algorithms.md).

Path selection with its skewed draft rows, then block verification of the chosen path.
"""

from __future__ import annotations

import numpy as np

from specjax.verify.reference.chain import block_law
from specjax.verify.reference.common import Law, multi_inputs, normalize_or


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
    """GBV path selection and skewed draft rows (docs/algorithms.md, GBV: the order, the law).

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
    tokens, q, p, n = multi_inputs(draft_tokens, draft_probs, target_probs, num_draft)
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
        q_skew[d] = normalize_or(z * power_sum, q_d)
        t = chosen[d]
        cum_below = a + through * cdf[t]
        through = through * q_d[t]
    return path, n_sel, q_skew


def gbv_law(draft_tokens, draft_probs, target_probs, num_draft=None) -> Law:
    """Greedy multi-path block verification (docs/algorithms.md, GBV).

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
    tokens, _, p, _ = multi_inputs(draft_tokens, draft_probs, target_probs, num_draft)
    path, n_sel, q_skew = gbv_select(draft_tokens, draft_probs, target_probs, num_draft)
    chain = block_law(tokens[path], q_skew, p[path], num_draft=n_sel)
    return {(tau, nxt, path): prob for (tau, nxt, _), prob in chain.items()}
