"""Shared pieces of the NumPy reference laws: outcome types, row validation and helpers.

Everything here is float64 and written for clarity; the input layouts and conventions are those
of :mod:`specjax.verify.reference`.
"""

from __future__ import annotations

import numpy as np

Outcome = tuple[int, int, int]
"""``(tau, next_token, path)``."""

Law = dict[Outcome, float]
"""Exact law of a verifier's outcome: outcome -> probability (positive entries only)."""


def normalize_or(x: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Returns ``x / sum(x)``, or ``fallback`` when ``x`` has no positive mass."""
    total = x.sum()
    if total > 0:
        return x / total
    return fallback


def accept_prob(numerator: float, denominator: float) -> float:
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


def first_pad(tokens: np.ndarray) -> int:
    """Index of the first padding token (-1) of a path, or its length: a draft ends there."""
    pads = np.flatnonzero(tokens < 0)
    return int(pads[0]) if pads.size else len(tokens)


def chain_inputs(
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
    return tokens, q, p, min(n, first_pad(tokens))


def multi_inputs(
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
    return tokens, q, p, np.minimum(n, [first_pad(row) for row in tokens])


def expected_accepted(law: Law) -> float:
    """Returns E[tau] under an outcome law (block efficiency is this plus one)."""
    return sum(prob * tau for (tau, _, _), prob in law.items())
