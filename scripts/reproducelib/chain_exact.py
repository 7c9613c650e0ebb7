"""Exact laws of the chain verifiers, by enumeration through the NumPy reference laws.

* :func:`enumerated_accepted`: E[tau] of a verifier on a small model, every draft block
  enumerated with its probability and the reference's exact outcome law summed over it (the BV
  paper's toy example, docs/algorithms.md's golden values);
* :func:`full_joint_optimum`: the best E[tau] of any coupling of the draft block and the
  target's block (a verifier that knows both joint laws), by linear programming, with the
  prefix bound sum_i (1 - TV of the length-i prefixes) beside it;
* :func:`token_expected` / :func:`block_expected`: one drafted block's exact expected accepted
  length under token and block verification (the reference's weights and stop probabilities).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from scipy.optimize import linprog

from specjax.verify import reference

Table = Callable[[tuple[int, ...]], tuple[np.ndarray, np.ndarray]]
"""A small model: prefix -> (target p(.|prefix) [V], draft q(.|prefix) [V])."""


def constant(p, q) -> Table:
    """The context-independent model with the same p and q after every prefix."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    return lambda prefix: (p, q)


def from_dicts(p: dict, q: dict, bonus) -> Table:
    """A context-dependent model from ``{prefix: row}`` tables; prefixes missing from ``p``
    (the bonus rows after a full block) get ``bonus``."""
    bonus = np.asarray(bonus, np.float64)
    return lambda prefix: (
        np.asarray(p.get(prefix, bonus), np.float64),
        np.asarray(q.get(prefix, bonus), np.float64),
    )


def blocks(table: Table, vocab: int, length: int):
    """Every draft block: ``(x, Q(x), tokens [L], draft rows [L, V], target rows [L+1, V])``."""
    for x in itertools.product(range(vocab), repeat=length):
        p_rows, q_rows, prob = [], [], 1.0
        for i in range(length):
            p, q = table(x[:i])
            p_rows.append(p)
            q_rows.append(q)
            prob *= q[x[i]]
        p_rows.append(table(x)[0])
        yield x, prob, np.asarray(x), np.stack(q_rows), np.stack(p_rows)


def enumerated_accepted(table: Table, vocab: int, length: int, verifier: str) -> float:
    """E[tau] of ``verifier`` (a chain name of :data:`specjax.verify.reference.LAWS`): the sum
    over every draft block x of Q(x) times the mean accepted length of the reference's exact
    outcome law on x."""
    total = 0.0
    for _, prob, tokens, q_rows, p_rows in blocks(table, vocab, length):
        if prob > 0:
            law = reference.law(verifier, tokens, q_rows, p_rows)
            total += prob * reference.expected_accepted(law)
    return total


def _joint(table: Table, vocab: int, length: int, which: int) -> dict[tuple, float]:
    """Law of a length-``length`` block under the target (``which = 0``) or the draft (1)."""
    law = {}
    for x in itertools.product(range(vocab), repeat=length):
        law[x] = float(np.prod([table(x[:i])[which][x[i]] for i in range(length)]))
    return law


def _common_prefix(x: tuple, y: tuple) -> int:
    n = 0
    while n < len(x) and x[n] == y[n]:
        n += 1
    return n


def full_joint_optimum(table: Table, vocab: int, length: int) -> tuple[float, float]:
    """``(LP optimum, prefix bound)`` of E[tau] for a verifier with full joint knowledge.

    The LP maximises E[common prefix of X and Y] over couplings of the draft block X ~ Q and the
    target block Y ~ P (the emitted block must have the target's law); the bound is
    ``sum_i sum_z min(Q_i(z), P_i(z))`` over length-i prefixes z, which no coupling can beat.
    """
    q_law, p_law = _joint(table, vocab, length, 1), _joint(table, vocab, length, 0)
    xs = list(q_law)
    n = len(xs)
    gain = np.array([[_common_prefix(x, y) for y in xs] for x in xs], np.float64)
    rows = np.zeros((2 * n, n * n))
    for i in range(n):
        rows[i, i * n : (i + 1) * n] = 1.0  # sum_y pi(x_i, y) = Q(x_i)
        rows[n + i, i::n] = 1.0  # sum_x pi(x, y_i) = P(y_i)
    b = np.array([q_law[x] for x in xs] + [p_law[y] for y in xs])
    lp = linprog(-gain.ravel(), A_eq=rows, b_eq=b, bounds=(0, None), method="highs")
    if not lp.success:
        raise RuntimeError(f"the coupling LP failed: {lp.message}")
    bound = 0.0
    for i in range(1, length + 1):
        q_i, p_i = _joint(table, vocab, i, 1), _joint(table, vocab, i, 0)
        bound += sum(min(q_i[z], p_i[z]) for z in q_i)
    return float(-lp.fun), bound


# ----------------------------------------------------------------------------- one drafted block


def token_expected(tokens, q_rows, p_rows) -> float:
    """E[tau | block] under token verification: ``sum_i prod_{j<=i} min(1, p_j(x_j)/q_j(x_j))``
    (equals the mean of :func:`specjax.verify.reference.token_law`'s outcome law)."""
    total, reach = 0.0, 1.0
    for i, x in enumerate(np.asarray(tokens)):
        p, q = float(p_rows[i][x]), float(q_rows[i][x])
        reach *= 0.0 if p <= 0 else (1.0 if q <= 0 else min(1.0, p / q))
        total += reach
    return total


def block_expected(tokens, q_rows, p_rows) -> float:
    """E[tau | block] under block verification, from the reference's stop probabilities h:
    ``P(tau = i) = h_i prod_{j>i} (1 - h_j)`` (docs/algorithms.md, "Block verification")."""
    _, h = reference.block_weights_and_stops(tokens, q_rows, p_rows)
    n = len(h) - 1
    return float(sum(i * h[i] * np.prod(1.0 - h[i + 1 :]) for i in range(1, n + 1)))
