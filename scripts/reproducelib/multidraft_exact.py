"""Exact single-step acceptance rates of the multi-draft verifiers, for any vocabulary.

At one node with target ``p`` and draft ``q`` (rows ``[V]``, float64) and ``n`` draft tokens,
the probability that the verifier's output is one of the drafts (ALGORITHMS.md §4):

* :func:`specinfer_with`: SpecInfer / RRS with replacement (§4.2). The residuals do not depend
  on the drafts, so ``alpha = 1 - prod_j (1 - sum_v min(q, r_j))``, ``r_1 = p``,
  ``r_{j+1} = norm(max(r_j - q, 0))``.
* :func:`specinfer_without`: RRS without replacement (§4.3), ``n <= 3``: the first draws are
  enumerated (vectorised over V, O(V^n)); a rejected draw x has ``r(x) = 0``, so removing it from
  the draft law only rescales the draft.
* :func:`spectr`: SpecTr's k-SEQ (§4.4) at the reference's rho*: ``1 - (1 - beta(rho*))^n``.
* :func:`gbv`: GBV with one level (§6): the selected draft is the best-ranked of n i.i.d. draws
  (rank by p/q, ties to the larger index), whose law is ``F(x)^n - (F(x) - q(x))^n`` with F the
  draft CDF in rank order, then block (= token) verification: ``sum_v min(p, q_skew)``.

:func:`reference_acceptance` computes the same quantities the slow way, enumerating every draft
tuple (:func:`specjax.verify.reference.draft_tuple_law`) through the reference laws; the report
checks the two agree.
"""

from __future__ import annotations

import numpy as np

from specjax.verify import reference

VERIFIERS = ("specinfer w/ repl.", "specinfer w/o repl.", "spectr", "gbv")
"""The single-step rates computed here, in table order."""

MAX_WITHOUT = 3
"""Largest n of :func:`specinfer_without` (its cost is O(V^n))."""


def _norm(x: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    total = x.sum(axis=-1, keepdims=True)
    return np.where(total > 0, x / np.where(total > 0, total, 1.0), fallback)


def specinfer_with(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """RRS with replacement."""
    none, r = 1.0, p
    for _ in range(n):
        none *= 1.0 - np.minimum(q, r).sum()
        r = _norm(np.maximum(r - q, 0.0), p)
    return 1.0 - none


def specinfer_without(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """RRS without replacement (sequential draws from q restricted to unseen tokens), n <= 3."""
    if not 1 <= n <= MAX_WITHOUT:
        raise ValueError(f"n must be in 1..{MAX_WITHOUT}, got {n}")
    alpha = np.minimum(p, q).sum()
    rej1 = q - np.minimum(p, q)  # P(draw x1 and reject it), [V]
    x1 = np.flatnonzero(rej1 > 0)
    if n == 1 or x1.size == 0:
        return float(alpha)
    r2 = _norm(np.maximum(p - q, 0.0), p)  # r2(x1) = 0 for every rejected x1
    scale1 = 1.0 / (1.0 - q[x1])  # q restricted to unseen tokens, [m]
    q2 = q[None, :] * scale1[:, None]  # [m, V] (entry x1 irrelevant: r2(x1) = 0)
    acc2 = np.minimum(q2, r2[None, :]).sum(axis=1)  # [m]
    if n == 2:
        return float(alpha + rej1[x1] @ acc2)
    rej2 = q2 - np.minimum(q2, r2[None, :])  # [m, V]
    rej2[np.arange(x1.size), x1] = 0.0  # x2 != x1
    r3 = _norm(np.maximum(r2[None, :] - q2, 0.0), p[None, :])  # [m, V], zero at x1 and x2
    left = 1.0 - q[x1][:, None] - q[None, :]  # [m, V]: unseen mass after x1, x2
    scale2 = np.where(left > 0, 1.0 / np.where(left > 0, left, 1.0), 0.0)
    acc3 = np.empty_like(rej2)
    for i in range(x1.size):  # [V, V] per first draw keeps memory at O(V^2)
        acc3[i] = np.minimum(q[None, :] * scale2[i][:, None], r3[i][None, :]).sum(axis=1)
    return float(alpha + rej1[x1] @ (acc2 + (rej2 * acc3).sum(axis=1)))


def spectr(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """k-SEQ at rho* (the reference's :func:`~specjax.verify.reference.spectr_rho`)."""
    rho = reference.spectr_rho(p, q, n)
    beta = np.minimum(q, p / rho).sum()
    return float(1.0 - (1.0 - beta) ** n)


def gbv_draft_law(p: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """GBV's skewed root law: the best-ranked of n i.i.d. draws (rank by p/q, ties to the larger
    token index; q = 0 ranks highest)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
    order = np.argsort(kappa, kind="stable")  # ascending, ties in index order
    cdf = np.empty_like(q)
    cdf[order] = np.cumsum(q[order])
    return np.maximum(cdf**n - np.maximum(cdf - q, 0.0) ** n, 0.0)


def gbv(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """GBV at one level: token verification of the skewed draft."""
    return float(np.minimum(p, gbv_draft_law(p, q, n)).sum())


def acceptance(p: np.ndarray, q: np.ndarray, n: int) -> dict[str, float]:
    """Every rate of :data:`VERIFIERS` at one node (``specinfer w/o`` only for n <= 3)."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    out = {"specinfer w/ repl.": specinfer_with(p, q, n), "spectr": spectr(p, q, n)}
    if n <= MAX_WITHOUT:
        out["specinfer w/o repl."] = specinfer_without(p, q, n)
    out["gbv"] = gbv(p, q, n)
    return {k: out[k] for k in VERIFIERS if k in out}


# ----------------------------------------------------------------------------- the slow way


def reference_acceptance(p: np.ndarray, q: np.ndarray, n: int) -> dict[str, float]:
    """The same rates by enumerating every draft tuple and summing P(tau = 1) of the reference
    laws (``[n, 1]`` multi-path inputs); tiny V only."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    target = np.broadcast_to(p, (n, 2, p.size))  # row 1 (the bonus) is never used for tau
    draft = np.broadcast_to(q, (n, 1, q.size))
    cases = {
        "specinfer w/ repl.": ("specinfer", True, {}),
        "specinfer w/o repl.": ("specinfer", False, {"replacement": False}),
        "spectr": ("spectr", True, {}),
        "gbv": ("gbv", True, {}),
    }
    out = {}
    for name, (law_name, iid, kwargs) in cases.items():
        total = 0.0
        for tup, prob in reference.draft_tuple_law(q, n, replacement=iid).items():
            tokens = np.asarray(tup)[:, None]
            law = reference.law(law_name, tokens, draft, target, **kwargs)
            total += prob * sum(pr for (tau, _, _), pr in law.items() if tau == 1)
        out[name] = total
    return out


def check_against_reference(seed: int, trials: int, vocab: int, ns=(1, 2, 3)) -> float:
    """Largest |closed form - enumeration| over random Dirichlet (p, q) pairs."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(trials):
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab) * 0.7)
        for n in ns:
            fast, slow = acceptance(p, q, n), reference_acceptance(p, q, n)
            worst = max(worst, *(abs(fast[k] - slow[k]) for k in fast))
    return worst
