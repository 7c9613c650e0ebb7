"""Draft schemes and the exact enumeration of every draft outcome with its probability.

A scheme draws one chain, i.i.d. paths, siblings without replacement or a small tree from q;
outcomes come in the verifiers' array layouts.

This module is a test helper, not a test file.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

import numpy as np

from tests.enumeration.models import Model, Prefix


@dataclasses.dataclass(frozen=True)
class Scheme:
    """How K path-major draft paths of length L are drawn from q.

    The paths form a tree: every node at depth ``d`` draws ``branching[d]`` children from
    ``q(.|node)`` (i.i.d. if ``replacement``, else sequentially without replacement in path-index
    order); path ``j`` follows child ``(j // size[d+1]) % branching[d]`` at depth ``d`` where
    ``size[d] = prod(branching[d:])``. Paths below one node share its prefix and rows.
    ``multi_path`` False means chain layouts ``[L]`` (one path).
    """

    name: str
    branching: tuple[int, ...]
    replacement: bool
    multi_path: bool

    @property
    def num_paths(self) -> int:
        """K."""
        return int(np.prod(self.branching))

    def block_size(self, d: int) -> int:
        """Number of paths below one node at depth ``d`` (``d = 0..L``)."""
        return int(np.prod(self.branching[d:]))


SCHEMES = ("chain", "iid", "wor", "wor_tree")
"""Scheme names accepted by :func:`make_scheme`."""


def make_scheme(name: str | Scheme, num_paths: int, length: int) -> Scheme:
    """Returns the :class:`Scheme` called ``name`` for K paths of length L.

    * ``chain``: one path (K = 1), chain layouts.
    * ``iid``: K independent chains (the root draws K i.i.d. children, then one chain each).
    * ``wor``: the root draws K distinct children without replacement (path-index order), then
      every path continues as an independent chain.
    * ``wor_tree``: 2 root children drawn without replacement, each with ``K // 2`` children
      drawn without replacement, then chains: for K = 4 the paths are
      ``[c1g1, c1g2, c2g1, c2g2]``. Needs an even K >= 4 and L >= 2.

    There is deliberately no i.i.d. tree: in path-major layouts two paths through one shared
    node look exactly like two i.i.d. siblings that happen to coincide, so the with-replacement
    tree walks (SpecInfer, SpecTr) would count the shared node as several draws (they are
    exact only for the ``iid`` scheme). Without replacement, equal tokens at a node are always
    one node, so ``wor_tree`` is unambiguous.
    """
    if isinstance(name, Scheme):
        return name
    if name == "chain":
        if num_paths != 1:
            raise ValueError(f"the chain scheme has one path, got K = {num_paths}")
        return Scheme("chain", (1,) * length, True, False)
    if name in ("iid", "wor"):
        branching = (num_paths,) + (1,) * (length - 1)
        return Scheme(name, branching, name == "iid", True)
    if name == "wor_tree":
        if num_paths < 4 or num_paths % 2 or length < 2:
            raise ValueError(
                f"{name} needs an even K >= 4 and L >= 2, got K={num_paths} L={length}"
            )
        branching = (2, num_paths // 2) + (1,) * (length - 2)
        return Scheme(name, branching, False, True)
    raise ValueError(f"unknown scheme {name!r}; choose one of {', '.join(SCHEMES)}")


def _sibling_outcomes(
    q: np.ndarray, count: int, replacement: bool
) -> Iterator[tuple[Prefix, float]]:
    """Every ordered tuple of ``count`` children drawn at one node, with its probability."""
    vocab = q.shape[0]
    if replacement:
        for children in itertools.product(range(vocab), repeat=count):
            prob = float(np.prod([q[t] for t in children]))
            if prob > 0:
                yield children, prob
        return
    if np.count_nonzero(q > 0) < count:
        raise ValueError(f"cannot draw {count} distinct tokens from q = {q}")
    for children in itertools.permutations(range(vocab), count):
        prob = 1.0
        for i, t in enumerate(children):
            remaining = sum(q[u] for u in range(vocab) if u not in children[:i])
            prob *= q[t] / remaining
        if prob > 0:
            yield children, prob


def resolve_num_draft(num_draft: int | None, length: int) -> int:
    """Valid draft length ``n`` (default ``L``), checked to lie in ``[0, L]``."""
    n = length if num_draft is None else int(num_draft)
    if not 0 <= n <= length:
        raise ValueError(f"num_draft must be in [0, {length}], got {n}")
    return n


def _rows(model: Model, tokens: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Draft rows ``[K, L, V]`` and target rows ``[K, L+1, V]`` of path-major ``tokens``.

    Rows past the valid length (draft ``d >= n``, target ``d > n``) are uniform.
    """
    paths, length = tokens.shape
    uniform = np.full(model.vocab, 1.0 / model.vocab)
    draft_probs = np.empty((paths, length, model.vocab))
    target_probs = np.empty((paths, length + 1, model.vocab))
    for j in range(paths):
        for d in range(length + 1):
            if d < length:
                draft_probs[j, d] = model.q(tokens[j, :d]) if d < n else uniform
            target_probs[j, d] = model.p(tokens[j, :d]) if d <= n else uniform
    return draft_probs, target_probs


def enumerate_drafts(
    model: Model, scheme: str | Scheme, num_paths: int, length: int, num_draft: int | None = None
) -> Iterator[tuple[float, np.ndarray, np.ndarray, np.ndarray]]:
    """Every draft outcome of a scheme with its probability.

    Args:
      model: the draft/target model (``model.depth >= length``).
      scheme: a name of :data:`SCHEMES` or a :class:`Scheme`.
      num_paths: K (1 for ``chain``).
      length: L.
      num_draft: valid length ``n <= L`` of every path (default ``L``); tokens past ``n`` are -1.

    Yields:
      ``(weight, draft_tokens, draft_probs, target_probs)`` with chain layouts ``[L]``,
      ``[L, V]``, ``[L+1, V]`` or multi-path layouts ``[K, L]``, ``[K, L, V]``, ``[K, L+1, V]``.
      ``draft_probs`` rows are the plain ``q(.|prefix)`` even for siblings drawn without
      replacement (the verifier applies that renormalisation itself).
    """
    scheme = make_scheme(scheme, num_paths, length)
    if scheme.num_paths != num_paths or len(scheme.branching) != length:
        raise ValueError(f"scheme {scheme} does not match K={num_paths}, L={length}")
    if model.depth < length:
        raise ValueError(f"model depth {model.depth} < draft length {length}")
    n = resolve_num_draft(num_draft, length)
    nodes = [(d, start) for d in range(n) for start in range(0, num_paths, scheme.block_size(d))]
    tokens = np.full((num_paths, length), -1, dtype=np.int64)

    def expand(i: int, weight: float) -> Iterator[tuple[float, np.ndarray]]:
        if i == len(nodes):
            yield weight, tokens.copy()
            return
        d, start = nodes[i]
        child = scheme.block_size(d + 1)
        q = model.q(tokens[start, :d])
        for children, prob in _sibling_outcomes(q, scheme.branching[d], scheme.replacement):
            for c, t in enumerate(children):
                tokens[start + c * child : start + (c + 1) * child, d] = t
            yield from expand(i + 1, weight * prob)

    for weight, draft in expand(0, 1.0):
        draft_probs, target_probs = _rows(model, draft, n)
        if scheme.multi_path:
            yield weight, draft, draft_probs, target_probs
        else:
            yield weight, draft[0], draft_probs[0], target_probs[0]
