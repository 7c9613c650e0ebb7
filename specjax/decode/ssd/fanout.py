"""How SSD spends its branch budget C over the possible verification outcomes.

A round's outcome is (k, b): k accepted draft tokens (0 <= k <= L) and the bonus token b. The
speculation cache guesses, for each k, the draft's top-``F_k`` bonus tokens; ``fan_out`` is the
static tuple ``(F_0, ..., F_L)`` and ``C = sum(F_k)`` the branches per row (glossary letter C).

Two families: the reference engine's uniform default, and Saguaro's capped geometric series.
If k is accepted with probability P(k) ~ alpha^k (1 - alpha) (alpha^L for k = L) and a miss
falls off as F^-r in the fan-out, minimising sum_k P(k) F_k^-r under sum_k F_k = C gives
F_k ~ P(k)^(1 / (1 + r)): geometric in k, the last term apart, each capped.
"""

from __future__ import annotations

import numpy as np


def uniform_fan_out(per_k: int, draft_len: int) -> tuple[int, ...]:
    """``(per_k,) * (L + 1)``: the reference engine's default."""
    if per_k < 1 or draft_len < 1:
        raise ValueError(f"uniform fan-out needs per_k >= 1 and L >= 1, got {per_k}, {draft_len}")
    return (per_k,) * (draft_len + 1)


def geometric_fan_out(
    budget: int, draft_len: int, alpha: float = 0.8, r: float = 1.0, cap: int | None = None
) -> tuple[int, ...]:
    """Saguaro's capped geometric fan-out ``(F_0, ..., F_L)`` summing to ``budget``.

    Args:
      budget: C, the branches per row (>= 1).
      draft_len: L.
      alpha: the per-token acceptance rate the series assumes (0 < alpha < 1).
      r: the power-law exponent of the miss rate in the fan-out (> 0).
      cap: the largest F_k (e.g. V - 1: no more distinct candidates exist); None: no cap.

    Returns:
      L + 1 non-negative ints summing to ``budget`` (largest-remainder rounding of the
      real-valued optimum, capped, the excess handed to the next-largest terms).
    """
    if budget < 1 or draft_len < 1 or not 0.0 < alpha < 1.0 or r <= 0:
        raise ValueError(
            f"geometric fan-out needs budget >= 1, L >= 1, 0 < alpha < 1 and r > 0, got "
            f"{budget}, {draft_len}, {alpha}, {r}"
        )
    cap = budget if cap is None else cap
    if cap * (draft_len + 1) < budget:
        raise ValueError(f"budget {budget} exceeds (L + 1) * cap = {(draft_len + 1) * cap}")
    k = np.arange(draft_len + 1)
    p_k = np.where(k < draft_len, alpha**k * (1 - alpha), alpha**draft_len)
    weight = p_k ** (1.0 / (1.0 + r))
    fan = np.zeros(draft_len + 1, np.int64)
    free = np.ones(draft_len + 1, bool)
    remaining = budget
    while remaining > 0:  # water-filling: share what is left over the uncapped terms
        share = weight * free / np.sum(weight * free) * remaining
        add = np.floor(share).astype(np.int64)
        order = np.argsort(-(share - add), kind="stable")
        add[order[: remaining - int(add.sum())]] += 1
        add = np.minimum(add, cap - fan)
        fan += add
        remaining -= int(add.sum())
        free &= fan < cap
    return tuple(int(f) for f in fan)


def bonus_candidates(k: int, draft_len: int, vocab_size: int) -> int:
    """How many tokens can be the bonus after k accepted tokens: V - 1 for k < L (the drafted
    token x_{k+1} was rejected, so it has no residual mass), V after all L."""
    return vocab_size if k == draft_len else vocab_size - 1


def fan_out_excess(fan_out: tuple[int, ...], vocab_size: int) -> str | None:
    """What is wrong with ``fan_out`` for a draft of ``vocab_size`` tokens (its first entry
    above :func:`bonus_candidates`), or None."""
    draft_len = len(fan_out) - 1
    for k, f in enumerate(fan_out):
        most = bonus_candidates(k, draft_len, vocab_size)
        if f > most:
            what = "V - 1" if k < draft_len else "V"
            why = "the vocabulary less the rejected drafted token" if k < draft_len else "any token"
            return (
                f"F_{k} = {f} exceeds {what} = {most}, the bonus candidates after {k} accepted "
                f"tokens ({why})"
            )
    return None


def branch_layout(fan_out: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Static ``(k_of [C], rank [C])``: branch c guesses the ``rank[c]``-th candidate for
    ``k_of[c]`` accepted tokens (k-major order)."""
    if any(f < 0 for f in fan_out) or sum(fan_out) < 1:
        raise ValueError(f"a fan-out needs non-negative entries and at least one branch: {fan_out}")
    k_of = np.repeat(np.arange(len(fan_out)), fan_out).astype(np.int32)
    rank = np.concatenate([np.arange(f) for f in fan_out]).astype(np.int32)
    return k_of, rank


def parse_fan_out(
    text: str, draft_len: int, budget: int, alpha: float, cap: int | None = None
) -> tuple[int, ...]:
    """A fan-out from a config string.

    ``"geometric"`` (``budget`` branches, :func:`geometric_fan_out` with ``alpha``, each term
    at most ``cap``, e.g. V - 1), ``"uniform"`` (``budget`` must be a multiple of L + 1), or
    L + 1 comma-separated ints.
    """
    text = text.strip()
    if text == "geometric":
        return geometric_fan_out(budget, draft_len, alpha, cap=cap)
    if text == "uniform":
        if budget % (draft_len + 1):
            raise ValueError(
                f"a uniform fan-out splits ssd_budget={budget} over L + 1 = {draft_len + 1} "
                "outcomes; make the budget a multiple of L + 1"
            )
        return uniform_fan_out(budget // (draft_len + 1), draft_len)
    try:
        fan = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(
            f"fan-out {text!r} is not 'geometric', 'uniform' or L + 1 comma-separated ints"
        ) from None
    if len(fan) != draft_len + 1 or min(fan) < 0 or sum(fan) < 1:
        raise ValueError(
            f"fan-out {text!r} needs L + 1 = {draft_len + 1} non-negative ints, at least one > 0"
        )
    return fan
