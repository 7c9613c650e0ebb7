"""Random drafts and target completions, batched, for Monte-Carlo tests of the jitted verifiers.

This module is a test helper, not a test file.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tests.enumeration.drafts import Scheme, make_scheme, resolve_num_draft
from tests.enumeration.models import JointLaw, Model


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
    n = resolve_num_draft(num_draft, length)
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
