"""Exact laws of the strings a verifier emits over every draft outcome (losslessness, E[tau]).

This module is a test helper, not a test file.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from specjax.verify import reference
from tests.enumeration.drafts import Scheme, enumerate_drafts, make_scheme, resolve_num_draft
from tests.enumeration.models import JointLaw, Model, Prefix


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
    n = resolve_num_draft(num_draft, length)
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
