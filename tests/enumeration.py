"""Exact-enumeration harness for verifier tests (ALGORITHMS §0.4).

A :class:`Model` holds a draft law ``q(.|prefix)`` and a target law ``p(.|prefix)`` for every
prefix of length ``0..depth`` over a tiny vocabulary. A draft *scheme* says how K draft paths of
length L are drawn from q (one chain, i.i.d. paths, siblings without replacement, small trees).
:func:`enumerate_drafts` lists every draft outcome with its probability, in exactly the array
layouts the verifiers take; :func:`emitted_law` sums ``weight x verifier law`` over them and
completes every emitted string ``x_1..x_tau, Y`` with target samples to length ``L+1``, so a
verifier is lossless iff that law equals :func:`target_joint` (``L+1``).

:func:`sample_drafts` and :func:`complete_with_target` draw the same objects at random, batched,
for Monte-Carlo tests of the jitted verifiers.

This module is a test helper, not a test file.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from specjax.verify import reference

Prefix = tuple[int, ...]
JointLaw = dict[Prefix, float]

# --------------------------------------------------------------------------------------------
# Models.
# --------------------------------------------------------------------------------------------


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
    """ALGORITHMS §3 motivating example: p = (1/3, 2/3), q = (2/3, 1/3) at every position."""
    return context_independent([1 / 3, 2 / 3], [2 / 3, 1 / 3], depth)


def context_dependent_example() -> Model:
    """ALGORITHMS §3 context-dependent example (V = 2, depth 2; bonus rows uniform)."""
    p_rows = {(): [1 / 2, 1 / 2], (0,): [3 / 4, 1 / 4], (1,): [1 / 5, 4 / 5]}
    q_rows = {(): [3 / 4, 1 / 4], (0,): [1 / 2, 1 / 2], (1,): [1 / 2, 1 / 2]}
    uniform = [1 / 2, 1 / 2]
    return from_functions(
        2, 2, lambda pre: p_rows.get(pre, uniform), lambda pre: q_rows.get(pre, uniform)
    )


# --------------------------------------------------------------------------------------------
# Draft schemes.
# --------------------------------------------------------------------------------------------


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
    tree walks (SpecInfer §4.2, SpecTr) would count the shared node as several draws (they are
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


def _resolve_num_draft(num_draft: int | None, length: int) -> int:
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
    n = _resolve_num_draft(num_draft, length)
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


# --------------------------------------------------------------------------------------------
# Exact laws of emitted strings.
# --------------------------------------------------------------------------------------------


def _target_completions(
    model: Model, prefix: Prefix, length: int
) -> Iterator[tuple[float, Prefix]]:
    """Every completion of ``prefix`` to ``length`` tokens by the target, with its probability."""
    if len(prefix) == length:
        yield 1.0, prefix
        return
    p = model.p(prefix)
    for v in range(model.vocab):
        if p[v] > 0:
            for prob, full in _target_completions(model, (*prefix, v), length):
                yield p[v] * prob, full


def complete_exactly(model: Model, prefix_law: Mapping[Prefix, float], length: int) -> JointLaw:
    """Law of strings of ``length`` obtained by completing a prefix law with target samples."""
    joint: JointLaw = defaultdict(float)
    for prefix, weight in prefix_law.items():
        if len(prefix) > length:
            raise ValueError(f"prefix {prefix} longer than {length}")
        for prob, full in _target_completions(model, tuple(prefix), length):
            if weight * prob > 0:
                joint[full] += weight * prob
    return dict(joint)


def target_joint(model: Model, length: int) -> JointLaw:
    """The target's joint law over strings of ``length`` tokens."""
    return complete_exactly(model, {(): 1.0}, length)


LawFn = Callable[..., reference.Law]


def _resolve_law(law_fn: LawFn | str) -> LawFn:
    return reference.LAWS[law_fn] if isinstance(law_fn, str) else law_fn


def emitted_prefix_law(
    model: Model,
    law_fn: LawFn | str,
    scheme: str | Scheme,
    num_paths: int,
    length: int,
    num_draft: int | None = None,
    **law_kwargs,
) -> tuple[JointLaw, float]:
    """Law of the emitted string ``x_1..x_tau, Y`` (not completed) and E[tau].

    Args:
      model, scheme, num_paths, length, num_draft: as in :func:`enumerate_drafts`.
      law_fn: a reference law (callable or name in ``reference.LAWS``), called as
        ``law_fn(draft_tokens, draft_probs, target_probs, num_draft, **law_kwargs)`` with an int
        ``num_draft`` for chains and a ``[K]`` array for multi-path schemes.
      **law_kwargs: extra verifier options (e.g. ``replacement=False``).

    Returns:
      ``(prefix_law, expected_tau)``.
    """
    law_fn = _resolve_law(law_fn)
    n = _resolve_num_draft(num_draft, length)
    multi_path = make_scheme(scheme, num_paths, length).multi_path
    n_arg = np.full(num_paths, n, dtype=np.int64) if multi_path else n
    prefixes: JointLaw = defaultdict(float)
    expected_tau = 0.0
    for weight, tokens, draft_probs, target_probs in enumerate_drafts(
        model, scheme, num_paths, length, num_draft
    ):
        outcomes = law_fn(tokens, draft_probs, target_probs, n_arg, **law_kwargs)
        for (tau, nxt, path), prob in outcomes.items():
            row = tokens[path] if multi_path else tokens
            accepted = tuple(int(t) for t in row[:tau])
            if tau > n or min(accepted, default=0) < 0:
                raise AssertionError(f"invalid outcome {(tau, nxt, path)} for draft {tokens}")
            prefixes[(*accepted, int(nxt))] += weight * prob
            expected_tau += weight * prob * tau
    return dict(prefixes), expected_tau


def emitted_law(
    model: Model,
    law_fn: LawFn | str,
    scheme: str | Scheme,
    num_paths: int,
    length: int,
    num_draft: int | None = None,
    **law_kwargs,
) -> JointLaw:
    """Exact law of the emitted string completed with target samples to ``L + 1`` tokens.

    Keys are tuples of ``L + 1`` tokens. A verifier is lossless iff this equals
    ``target_joint(model, L + 1)``. Arguments as in :func:`emitted_prefix_law`.
    """
    prefixes, _ = emitted_prefix_law(
        model, law_fn, scheme, num_paths, length, num_draft, **law_kwargs
    )
    return complete_exactly(model, prefixes, length + 1)


def expected_accepted_tokens(
    model: Model,
    law_fn: LawFn | str,
    scheme: str | Scheme,
    num_paths: int,
    length: int,
    num_draft: int | None = None,
    **law_kwargs,
) -> float:
    """Exact E[tau] over drafts and verifier randomness."""
    _, expected_tau = emitted_prefix_law(
        model, law_fn, scheme, num_paths, length, num_draft, **law_kwargs
    )
    return expected_tau


def block_efficiency(
    model: Model,
    law_fn: LawFn | str,
    scheme: str | Scheme,
    num_paths: int,
    length: int,
    num_draft: int | None = None,
    **law_kwargs,
) -> float:
    """Exact block efficiency E[tau] + 1."""
    return 1.0 + expected_accepted_tokens(
        model, law_fn, scheme, num_paths, length, num_draft, **law_kwargs
    )


def max_abs_error(law_a: Mapping[Prefix, float], law_b: Mapping[Prefix, float]) -> float:
    """Largest ``|law_a(s) - law_b(s)|`` over the union of supports."""
    keys = set(law_a) | set(law_b)
    return max((abs(law_a.get(s, 0.0) - law_b.get(s, 0.0)) for s in keys), default=0.0)


# --------------------------------------------------------------------------------------------
# Random drafts and completions for Monte-Carlo tests.
# --------------------------------------------------------------------------------------------


class DraftBatch(NamedTuple):
    """A batch of random drafts in verifier layouts (leading batch dim ``num``).

    Attributes:
      draft_tokens: ``[num, L]`` (chain) or ``[num, K, L]`` int64, pads -1.
      draft_probs: ``[num, L, V]`` or ``[num, K, L, V]``.
      target_probs: ``[num, L+1, V]`` or ``[num, K, L+1, V]``.
      num_draft: ``[num]`` or ``[num, K]`` int64.
      prefix_id: ``[num, L+1]`` or ``[num, K, L+1]`` int64: entry ``d`` identifies the prefix of
        length ``d`` of the path (``sum_{e<d} V**e + row index``), so two paths of a row share
        a tree node at depth ``d`` iff their ids are equal; -1 past the valid length.
    """

    draft_tokens: np.ndarray
    draft_probs: np.ndarray
    target_probs: np.ndarray
    num_draft: np.ndarray
    prefix_id: np.ndarray


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(x)


def sample_drafts(
    model: Model,
    scheme: str | Scheme,
    num_paths: int,
    length: int,
    num: int,
    rng: np.random.Generator,
    num_draft: int | None = None,
) -> DraftBatch:
    """Draws ``num`` independent drafts of a scheme (same law as :func:`enumerate_drafts`).

    Each node's children are drawn with the Gumbel-max trick from ``q(.|node)``; siblings
    without replacement mask the tokens already drawn at that node.
    """
    scheme = make_scheme(scheme, num_paths, length)
    n = _resolve_num_draft(num_draft, length)
    vocab = model.vocab
    tokens = np.full((num, num_paths, length), -1, dtype=np.int64)
    for d in range(n):
        child = scheme.block_size(d + 1)
        for start in range(0, num_paths, scheme.block_size(d)):
            log_q = _log(model.q_table[d][model.indices(tokens[:, start, :d])])
            for c in range(scheme.branching[d]):
                if not np.all(np.isfinite(log_q).any(axis=-1)):
                    raise ValueError("not enough draft support to draw distinct siblings")
                drawn = np.argmax(log_q + rng.gumbel(size=log_q.shape), axis=-1)
                tokens[:, start + c * child : start + (c + 1) * child, d] = drawn[:, None]
                if not scheme.replacement:
                    log_q[np.arange(num), drawn] = -np.inf

    uniform = np.full(vocab, 1.0 / vocab)
    draft_probs = np.empty((num, num_paths, length, vocab))
    target_probs = np.empty((num, num_paths, length + 1, vocab))
    prefix_id = np.full((num, num_paths, length + 1), -1, dtype=np.int64)
    for j in range(num_paths):
        for d in range(length + 1):
            if d <= n:
                idx = model.indices(tokens[:, j, :d])
                target_probs[:, j, d] = model.p_table[d][idx]
                prefix_id[:, j, d] = sum(vocab**e for e in range(d)) + idx
            else:
                target_probs[:, j, d] = uniform
            if d < length:
                draft_probs[:, j, d] = model.q_table[d][idx] if d < n else uniform
    num_draft_arr = np.full((num, num_paths), n, dtype=np.int64)
    batch = DraftBatch(tokens, draft_probs, target_probs, num_draft_arr, prefix_id)
    if scheme.multi_path:
        return batch
    return DraftBatch(*(x[:, 0] for x in batch))


def emitted_prefixes(
    draft_tokens: np.ndarray, num_accepted: np.ndarray, next_token: np.ndarray, path=None
) -> np.ndarray:
    """Emitted strings ``x_1..x_tau, Y`` of a batch of verifier results, padded with -1.

    Args:
      draft_tokens: ``[num, L]`` or ``[num, K, L]``.
      num_accepted: ``[num]`` tau.
      next_token: ``[num]``.
      path: ``[num]`` path followed (multi-path only).

    Returns:
      ``[num, L+1]`` int64, -1 after position ``tau``.
    """
    draft_tokens = np.asarray(draft_tokens)
    num_accepted = np.asarray(num_accepted)
    if draft_tokens.ndim == 3:
        draft_tokens = draft_tokens[np.arange(draft_tokens.shape[0]), np.asarray(path)]
    num, length = draft_tokens.shape
    out = np.full((num, length + 1), -1, dtype=np.int64)
    positions = np.arange(length)
    out[:, :length] = np.where(positions < num_accepted[:, None], draft_tokens, -1)
    out[np.arange(num), num_accepted] = np.asarray(next_token)
    return out


def complete_with_target(
    model: Model, prefixes, length: int, rng: np.random.Generator
) -> np.ndarray:
    """Completes emitted strings with target samples to ``length`` tokens.

    Args:
      model: the model.
      prefixes: a sequence of token sequences, or an int array ``[num, length']`` whose entries
        past each string's end are -1 (as returned by :func:`emitted_prefixes`).
      length: final length (``<= model.depth + 1``).
      rng: numpy generator.

    Returns:
      ``[num, length]`` int64 strings.
    """
    rows = [[int(t) for t in pre if t >= 0] for pre in prefixes]
    out = np.full((len(rows), length), -1, dtype=np.int64)
    for i, pre in enumerate(rows):
        if len(pre) > length:
            raise ValueError(f"prefix {pre} longer than {length}")
        out[i, : len(pre)] = pre
    for m in range(length):
        todo = np.flatnonzero(out[:, m] < 0)
        if todo.size == 0:
            continue
        log_p = _log(model.p_table[m][model.indices(out[todo, :m])])
        out[todo, m] = np.argmax(log_p + rng.gumbel(size=log_p.shape), axis=-1)
    return out


def empirical_law(strings: np.ndarray) -> JointLaw:
    """Frequency of each row of ``strings`` ``[num, length]``."""
    values, counts = np.unique(np.asarray(strings), axis=0, return_counts=True)
    return {tuple(int(t) for t in v): c / len(strings) for v, c in zip(values, counts, strict=True)}
