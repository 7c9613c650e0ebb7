"""Exact-enumeration harness for verifier tests (docs/algorithms.md, "How exactness is proven").

A :class:`Model` holds a draft law ``q(.|prefix)`` and a target law ``p(.|prefix)`` for every
prefix of length ``0..depth`` over a tiny vocabulary. A draft *scheme* says how K draft paths of
length L are drawn from q (one chain, i.i.d. paths, siblings without replacement, small trees).
:func:`enumerate_drafts` lists every draft outcome with its probability, in exactly the array
layouts the verifiers take; :func:`emitted_law` sums ``weight x verifier law`` over them and
completes every emitted string ``x_1..x_tau, Y`` with target samples to length ``L+1``, so a
verifier is lossless iff that law equals :func:`target_joint` (``L+1``).

:func:`sample_drafts` and :func:`complete_with_target` draw the same objects at random, batched,
for Monte-Carlo tests of the jitted verifiers.

Modules: :mod:`.models` (draft/target models), :mod:`.drafts` (draft schemes and their exact
enumeration), :mod:`.laws` (exact laws of emitted strings) and :mod:`.sampling` (random drafts
and completions); every public name is re-exported here, so tests write ``en.<name>``.

This package is a test helper, not a test file.
"""

from __future__ import annotations

from tests.enumeration.drafts import SCHEMES, Scheme, enumerate_drafts, make_scheme
from tests.enumeration.laws import (
    LawFn,
    block_efficiency,
    complete_exactly,
    emitted_law,
    emitted_prefix_law,
    expected_accepted_tokens,
    max_abs_error,
    target_joint,
)
from tests.enumeration.models import (
    JointLaw,
    Model,
    Prefix,
    bv_paper_model,
    context_dependent_example,
    context_independent,
    from_functions,
    random_model,
)
from tests.enumeration.sampling import (
    DraftBatch,
    complete_with_target,
    emitted_prefixes,
    empirical_law,
    sample_drafts,
)

__all__ = [
    "SCHEMES",
    "DraftBatch",
    "JointLaw",
    "LawFn",
    "Model",
    "Prefix",
    "Scheme",
    "block_efficiency",
    "bv_paper_model",
    "complete_exactly",
    "complete_with_target",
    "context_dependent_example",
    "context_independent",
    "emitted_law",
    "emitted_prefix_law",
    "emitted_prefixes",
    "empirical_law",
    "enumerate_drafts",
    "expected_accepted_tokens",
    "from_functions",
    "make_scheme",
    "max_abs_error",
    "random_model",
    "sample_drafts",
    "target_joint",
]
