"""Draft/target models of the exact-enumeration harness: next-token laws at every prefix.

This module is a test helper, not a test file.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence

import numpy as np

Prefix = tuple[int, ...]
JointLaw = dict[Prefix, float]


@dataclasses.dataclass(frozen=True)
class Model:
    """Draft ``q`` and target ``p`` next-token laws at every prefix of length ``0..depth``.

    ``p_table[m]`` and ``q_table[m]`` have shape ``[V**m, V]``; the row of prefix
    ``(x_1..x_m)`` is at index ``sum_i x_i V**(m-i)`` (base-V digits, first token most
    significant). A model of depth ``D`` serves draft lengths ``L <= D`` (the target row at
    prefix length ``L`` is the bonus row and completes strings to length ``L + 1``).
    """

    p_table: tuple[np.ndarray, ...]
    q_table: tuple[np.ndarray, ...]

    @property
    def vocab(self) -> int:
        """Vocabulary size V."""
        return self.p_table[0].shape[-1]

    @property
    def depth(self) -> int:
        """Longest prefix with defined rows."""
        return len(self.p_table) - 1

    def index(self, prefix: Sequence[int]) -> int:
        """Row index of ``prefix`` in the tables of its length."""
        idx = 0
        for x in prefix:
            if not 0 <= int(x) < self.vocab:
                raise ValueError(f"invalid token {x} in prefix {tuple(prefix)}")
            idx = idx * self.vocab + int(x)
        return idx

    def indices(self, prefixes: np.ndarray) -> np.ndarray:
        """Row indices of a batch of prefixes ``[num, m]`` (all tokens valid)."""
        prefixes = np.asarray(prefixes, dtype=np.int64)
        idx = np.zeros(prefixes.shape[0], dtype=np.int64)
        for m in range(prefixes.shape[1]):
            idx = idx * self.vocab + prefixes[:, m]
        return idx

    def p(self, prefix: Sequence[int]) -> np.ndarray:
        """Target law ``p(. | prefix)`` ``[V]``."""
        return self.p_table[len(prefix)][self.index(prefix)]

    def q(self, prefix: Sequence[int]) -> np.ndarray:
        """Draft law ``q(. | prefix)`` ``[V]``."""
        return self.q_table[len(prefix)][self.index(prefix)]


def _all_prefixes(vocab: int, length: int) -> Iterator[Prefix]:
    """All prefixes of ``length`` in table-index order."""
    return itertools.product(range(vocab), repeat=length)


def from_functions(
    vocab: int,
    depth: int,
    p_fn: Callable[[Prefix], Sequence[float]],
    q_fn: Callable[[Prefix], Sequence[float]],
) -> Model:
    """Builds a model from ``p_fn(prefix)`` and ``q_fn(prefix)`` (each returning ``[V]``)."""
    p_table, q_table = [], []
    for m in range(depth + 1):
        prefixes = list(_all_prefixes(vocab, m))
        p_table.append(np.array([p_fn(pre) for pre in prefixes], dtype=np.float64))
        q_table.append(np.array([q_fn(pre) for pre in prefixes], dtype=np.float64))
    return Model(tuple(p_table), tuple(q_table))


def context_independent(p: Sequence[float], q: Sequence[float], depth: int) -> Model:
    """The same ``p`` and ``q`` after every prefix."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    return from_functions(len(p), depth, lambda _: p, lambda _: q)


def _zero_some(rng: np.random.Generator, rows: np.ndarray, count: int) -> np.ndarray:
    """Zeroes ``count`` random entries of every row and renormalises."""
    if count <= 0:
        return rows
    if count >= rows.shape[-1]:
        raise ValueError(f"cannot zero {count} of {rows.shape[-1]} entries")
    rows = rows.copy()
    for row in rows:
        row[rng.choice(rows.shape[-1], size=count, replace=False)] = 0.0
    return rows / rows.sum(axis=-1, keepdims=True)


def random_model(
    rng: np.random.Generator,
    vocab: int,
    depth: int,
    *,
    alpha: float = 1.0,
    q_zeros: int = 0,
    p_zeros: int = 0,
    one_hot_p: bool = False,
    p_equals_q: bool = False,
) -> Model:
    """A random context-dependent model: independent Dirichlet(alpha) rows at every prefix.

    Args:
      rng: numpy generator.
      vocab: V.
      depth: longest prefix with rows (use ``L`` for draft length ``L``).
      alpha: Dirichlet concentration.
      q_zeros: number of exact zeros in every draft row (``V - 1`` gives one-hot drafts).
      p_zeros: number of exact zeros in every target row.
      one_hot_p: target rows one-hot at a random token (temperature 0).
      p_equals_q: target rows equal to the draft rows (after ``q_zeros``).
    """
    p_table, q_table = [], []
    for m in range(depth + 1):
        rows = vocab**m
        q = _zero_some(rng, rng.dirichlet(np.full(vocab, alpha), size=rows), q_zeros)
        if p_equals_q:
            p = q.copy()
        elif one_hot_p:
            p = np.eye(vocab)[rng.integers(vocab, size=rows)]
        else:
            p = _zero_some(rng, rng.dirichlet(np.full(vocab, alpha), size=rows), p_zeros)
        p_table.append(p)
        q_table.append(q)
    return Model(tuple(p_table), tuple(q_table))


def bv_paper_model(depth: int) -> Model:
    """The BV paper's example: p = (1/3, 2/3), q = (2/3, 1/3) at every position."""
    return context_independent([1 / 3, 2 / 3], [2 / 3, 1 / 3], depth)


def context_dependent_example() -> Model:
    """docs/algorithms.md's context-dependent example (V = 2, depth 2; bonus rows uniform)."""
    p_rows = {(): [1 / 2, 1 / 2], (0,): [3 / 4, 1 / 4], (1,): [1 / 5, 4 / 5]}
    q_rows = {(): [3 / 4, 1 / 4], (0,): [1 / 2, 1 / 2], (1,): [1 / 2, 1 / 2]}
    uniform = [1 / 2, 1 / 2]
    return from_functions(
        2, 2, lambda pre: p_rows.get(pre, uniform), lambda pre: q_rows.get(pre, uniform)
    )
