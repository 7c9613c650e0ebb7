"""Exact single-step acceptance rates of the multi-draft verifiers, in closed form, for any V.

At one node with target ``p`` and draft ``q`` (rows ``[V]``, float64) and ``n`` draft tokens,
the probability that the verifier's output is one of the drafts (docs/algorithms.md). NumPy,
float64, on the host: for analysis (e.g. a logged run's expected acceptance per verifier), next
to :mod:`specjax.verify.optimal`'s optimum alpha*:

* :func:`specinfer_with`: SpecInfer / RRS with replacement. The residuals do not depend
  on the drafts, so ``alpha = 1 - prod_j (1 - sum_v min(q, r_j))``, ``r_1 = p``,
  ``r_{j+1} = norm(max(r_j - q, 0))``.
* :func:`specinfer_without`: RRS without replacement, ``n <= 3``: the first n − 1 draws
  are enumerated; a rejected draw x has ``r(x) = 0``, so removing it from the draft law only
  rescales the draft, and each acceptance sum comes from prefix sums over one sort by r/q
  (O(V log V) for n = 2, O(V² log V) for n = 3).
* :func:`spectr`: SpecTr's k-SEQ at the reference's rho*: ``1 - (1 - beta(rho*))^n``.
* :func:`gbv`: GBV with one level: the selected draft is the best-ranked of n i.i.d. draws
  (rank by p/q, ties to the larger index), whose law is ``F(x)^n - (F(x) - q(x))^n`` with F the
  draft CDF in rank order, then block (= token) verification: ``sum_v min(p, q_skew)``.

:func:`reference_acceptance` computes the same quantities the slow way, enumerating every draft
tuple (:func:`specjax.verify.reference.draft_tuple_law`) through the reference laws (tiny V);
``tests/test_optimal.py`` checks the two agree.
"""

from __future__ import annotations

import numpy as np

from specjax.verify import reference

VERIFIERS = ("specinfer w/ repl.", "specinfer w/o repl.", "spectr", "gbv")
"""The single-step rates computed here, in table order."""

MAX_WITHOUT = 3
"""Largest n of :func:`specinfer_without` (it enumerates the first n − 1 draws)."""


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


class _Sorted:
    """Sums of ``min(a q(v), r(v))`` over v for many ``a`` at once: the tokens of positive q
    sorted once by r/q, with prefix sums of q and r (q = 0 tokens add nothing)."""

    def __init__(self, q: np.ndarray, r: np.ndarray):
        drafted = q > 0
        ratio = r[drafted] / q[drafted]
        order = np.argsort(ratio, kind="stable")
        self.ratio = ratio[order]
        self.q = np.concatenate([[0.0], np.cumsum(q[drafted][order])])  # [|supp q| + 1]
        self.r = np.concatenate([[0.0], np.cumsum(r[drafted][order])])

    def below(self, x: np.ndarray) -> np.ndarray:
        """How many sorted tokens have r/q < x."""
        return np.searchsorted(self.ratio, x, side="left")

    def min_sum(self, a: np.ndarray) -> np.ndarray:
        """``sum_v min(a q(v), r(v))`` per entry of ``a`` (>= 0): a q where r/q >= a, else r."""
        k = self.below(a)
        return a * (self.q[-1] - self.q[k]) + self.r[k]


def specinfer_without(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """RRS without replacement (sequential draws from q restricted to unseen tokens), n <= 3.

    The first draw x1 is enumerated over every token it can be rejected at, the second (n = 3)
    over every token. Each sum ``sum_v min(q(v) / (1 - q(x1) [- q(x2)]), r(v))`` comes from
    prefix sums over the tokens sorted by r2/q once: the next residual r3 = norm(max(r2 - s q,
    0)) is a non-decreasing function of r2/q, so the same order serves every x1. O(V log V) for
    n = 2, O(m V log V) for n = 3 (m first draws that can be rejected)."""
    if not 1 <= n <= MAX_WITHOUT:
        raise ValueError(f"n must be in 1..{MAX_WITHOUT}, got {n}")
    alpha = np.minimum(p, q).sum()
    rej1 = q - np.minimum(p, q)  # P(draw x1 and reject it), [V]
    x1 = np.flatnonzero(rej1 > 0)
    if n == 1 or x1.size == 0:
        return float(alpha)
    r2 = _norm(np.maximum(p - q, 0.0), p)  # r2(x1) = 0 for every rejected x1
    scale1 = 1.0 / (1.0 - q[x1])  # q restricted to unseen tokens, [m]
    by_r2 = _Sorted(q, r2)
    acc2 = by_r2.min_sum(scale1)  # [m] (entry x1 irrelevant: r2(x1) = 0)
    if n == 2:
        return float(alpha + rej1[x1] @ acc2)
    by_p = _Sorted(q, p)  # the residual's fallback when r3 has no mass
    undrafted = r2[q <= 0].sum()  # r2's mass where q = 0 (always in r3)
    below = by_r2.below(scale1)
    mass3 = (  # Z = sum_v max(r2 - s1 q, 0), r3's normaliser per x1
        undrafted + (by_r2.r[-1] - by_r2.r[below]) - scale1 * (by_r2.q[-1] - by_r2.q[below])
    )
    # x2 in ascending q: each row's thresholds then ascend too (a faster search); small blocks
    # of first draws keep the [block, V] temporaries in cache.
    by_q = np.argsort(q, kind="stable")
    q_x2, r2_x2 = q[by_q], r2[by_q]
    where_x1 = np.empty(q.size, np.int64)
    where_x1[by_q] = np.arange(q.size)
    block = max(1, 2**20 // q.size)
    third = np.empty(x1.size)
    for lo in range(0, x1.size, block):
        i = slice(lo, lo + block)
        s1, z = scale1[i][:, None], mass3[i][:, None]  # [b, 1]
        rej2 = np.maximum(s1 * q_x2 - r2_x2, 0.0)  # [b, V]
        rej2[np.arange(rej2.shape[0]), where_x1[x1[i]]] = 0.0  # x2 != x1
        left = (1.0 - q[x1[i]])[:, None] - q_x2  # [b, V]: unseen mass after x1, x2
        s2 = np.divide(1.0, left, out=np.zeros_like(left), where=left > 0)
        ok = z > 0
        zz = np.where(ok, z, 1.0)
        # r3 = q max(r2/q - s1, 0) / Z: a q where r2/q >= s1 + a Z, r3 between s1 and that.
        top, bottom = by_r2.below(s1 + s2 * zz), below[i][:, None]
        base = by_r2.r[bottom] - s1 * by_r2.q[bottom]  # [b, 1]
        q_top = by_r2.q[top]
        acc3 = s2 * (by_r2.q[-1] - q_top) + (by_r2.r[top] - s1 * q_top - base) / zz
        if not ok.all():  # r3 = p when max(r2 - q2, 0) has no mass
            acc3 = np.where(ok, acc3, by_p.min_sum(s2))
        third[i] = np.einsum("ij,ij->i", rej2, acc3)
    return float(alpha + rej1[x1] @ (acc2 + third))


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
