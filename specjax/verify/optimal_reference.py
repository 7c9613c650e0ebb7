"""Slow, obviously-correct NumPy references for the optimal multi-draft acceptance rate.

These enumerate everything explicitly in float64 and are only meant for tiny vocabularies (tests).
The fast JAX version is :func:`specjax.verify.optimal.optimal_acceptance`; both implement the dual
formula of Hu et al. (arXiv 2502.18779), see docs/algorithms.md, "Optimal multi-draft acceptance":

    alpha* = min over H ⊆ vocab of [ 1 + p(H) - Q(all n drafts in H) ],

where Q is the law of the ordered draft tuple. Vectors are one row ``[V]`` (letters of
:mod:`specjax.typing`).
"""

from __future__ import annotations

import itertools

import numpy as np


def draft_tuple_law(q: np.ndarray, n: int, replacement: bool) -> dict[tuple[int, ...], float]:
    """Law of the ordered draft tuple (x_1, ..., x_n) drawn from one draft distribution.

    Args:
      q: draft distribution ``[V]`` (non-negative; rows are expected to sum to 1).
      n: number of drafts (>= 1).
      replacement: True for i.i.d. draws from ``q``; False for sequential sampling without
        replacement (draw j from ``q`` restricted to the unseen tokens, renormalised).

    Returns:
      ``{tuple of n token ids: probability}`` over every tuple of positive probability. Without
      replacement the tuples have distinct tokens and x_j has probability
      ``q(x_j) / (sum(q) - q(x_1) - ... - q(x_{j-1}))``.

    Raises:
      ValueError: if ``n < 1`` or, without replacement, if ``n`` exceeds the support of ``q``.
    """
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 1:
        raise ValueError(f"q must be one row [V], got shape {q.shape}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    support = [int(v) for v in np.flatnonzero(q > 0)]
    if not replacement and n > len(support):
        raise ValueError(
            f"sampling {n} drafts without replacement needs n <= |supp(q)| = {len(support)}"
        )
    law: dict[tuple[int, ...], float] = {}
    if replacement:
        for tup in itertools.product(support, repeat=n):
            law[tup] = float(np.prod([q[v] for v in tup]))
    else:
        for tup in itertools.permutations(support, n):
            prob = 1.0
            for j, v in enumerate(tup):
                # Mass of the unseen tokens, summed afresh (no cancellation for tiny q).
                unseen = sum(q[u] for u in support if u not in tup[:j])
                prob *= q[v] / unseen
            law[tup] = float(prob)
    return law


def optimal_acceptance_bruteforce(p: np.ndarray, q: np.ndarray, n: int, replacement: bool) -> float:
    """Optimal n-draft acceptance rate of one row by enumeration of all 2^V subsets H.

    Computes ``min over all H of 1 + p(H) - Q(all n drafts in H)`` with ``Q`` the explicit tuple
    law of :func:`draft_tuple_law` (no prefix shortcut, no quadrature). Cost O(2^V * |tuples|).

    Args:
      p: target distribution ``[V]``.
      q: draft distribution ``[V]``.
      n: number of drafts (>= 1); without replacement at most ``|supp(q)|``.
      replacement: draft sampling method (see :func:`draft_tuple_law`).

    Returns:
      alpha*, a float in [0, 1] (for normalised inputs).
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 1:
        raise ValueError(f"p and q must be rows of the same shape [V], got {p.shape}, {q.shape}")
    vocab = p.shape[0]
    law = draft_tuple_law(q, n, replacement)
    # Bit mask of the tokens used by each tuple: the tuple lies in H iff mask & ~H == 0.
    masks = np.array([sum(1 << v for v in set(tup)) for tup in law], dtype=np.int64)
    probs = np.array(list(law.values()), dtype=np.float64)
    best = np.inf
    for h in range(1 << vocab):
        p_h = sum(p[v] for v in range(vocab) if h >> v & 1)
        q_all_in = probs[(masks & ~h) == 0].sum()
        best = min(best, 1.0 + p_h - q_all_in)
    return float(best)
