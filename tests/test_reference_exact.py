"""Exact tests of the NumPy reference laws (specjax.verify.reference) across all verifiers.

Losslessness is checked by exact enumeration (docs/algorithms.md): every draft outcome x every
verifier outcome, completed with target probabilities, must reproduce the target's joint law of
length-(L+1) strings. This file holds the tests that span chain and multi-path verifiers and the
sanity checks of the enumeration harness; chain-only and multi-path-only tests are in
``test_reference_exact_chain.py`` and ``test_reference_exact_multi.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from specjax.verify import reference as ref
from tests import enumeration as en
from tests.reference_exact_cases import (
    MULTI_LAWS,
    TOL,
    lossless_error,
    root_support,
    variant_model,
)

# --------------------------------------------------------------------------------------------
# Losslessness by exact enumeration.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vocab", "length", "num_draft"), [(3, 3, 0), (3, 3, 1), (2, 3, 2), (4, 2, 1)]
)
@pytest.mark.parametrize("variant", ["dirichlet", "q_zeros", "p_zeros", "one_hot_p"])
def test_num_draft_lossless(vocab, length, num_draft, variant):
    model = variant_model(vocab, length, variant, seed=4)
    for name in ("token", "block", "gumbel"):
        assert lossless_error(model, name, "chain", 1, length, num_draft) <= TOL, name
    if variant == "one_hot_p":
        assert lossless_error(model, "greedy", "chain", 1, length, num_draft) <= TOL
    num_paths = 2
    for name, scheme, kwargs in MULTI_LAWS.values():
        if scheme == "wor" and root_support(model) < num_paths:
            continue
        error = lossless_error(model, name, scheme, num_paths, length, num_draft, **kwargs)
        assert error <= TOL, name


def test_enumeration_detects_broken_verifiers():
    """The harness must flag verifiers that are not exact (guards against a vacuous harness)."""
    model = en.context_independent((0.4, 0.3, 0.2, 0.1), (0.1, 0.2, 0.3, 0.4), 2)
    # Verifiers for i.i.d. siblings applied to siblings drawn without replacement are biased.
    assert lossless_error(model, "specinfer", "wor", 2, 2, replacement=True) > 1e-3
    assert lossless_error(model, "spectr", "wor", 2, 2) > 1e-3

    def first_failure_block(draft_tokens, draft_probs, target_probs, num_draft=None):
        """Block verification with the wrong "first failure stops" rule."""
        w, h = ref.block_weights_and_stops(draft_tokens, draft_probs, target_probs, num_draft)
        law, reach, n = {}, 1.0, len(h) - 1
        for i in range(1, n + 1):
            dist = np.maximum(w[i - 1] * target_probs[i - 1] - draft_probs[i - 1], 0.0)
            dist = dist / dist.sum() if dist.sum() > 0 else target_probs[i - 1]
            ref.add_outcome(law, i - 1, dist, 0, reach * (1 - h[i]))
            reach *= h[i]
        ref.add_outcome(law, n, target_probs[n], 0, reach)
        return law

    assert lossless_error(en.bv_paper_model(2), first_failure_block, "chain", 1, 2) > 1e-3


# --------------------------------------------------------------------------------------------
# Reference internals and harness sanity.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ref.LAWS))
def test_laws_are_distributions(name):
    model = variant_model(3, 3, "q_zeros", seed=11)
    scheme, num_paths = ("chain", 1) if name in ref.CHAIN_LAWS else ("iid", 3)
    batch = en.sample_drafts(
        model, scheme, num_paths, 3, 30, np.random.default_rng(11), num_draft=2
    )
    for row in range(30):
        law = ref.law(
            name,
            batch.draft_tokens[row],
            batch.draft_probs[row],
            batch.target_probs[row],
            batch.num_draft[row],
        )
        assert all(prob > 0 for prob in law.values())
        assert abs(sum(law.values()) - 1.0) <= TOL
        assert all(0 <= tau <= 2 for tau, _, _ in law)


@pytest.mark.parametrize("scheme", ["iid", "wor", "wor_tree"])
def test_enumeration_and_sampling_agree(scheme):
    """The enumerated draft law sums to 1 and matches sample_drafts' frequencies."""
    vocab, length, num_paths, num = 3, 2, (4 if scheme == "wor_tree" else 2), 20_000
    model = variant_model(vocab, length, "dirichlet", seed=14)
    exact = {}
    for weight, tokens, draft_probs, target_probs in en.enumerate_drafts(
        model, scheme, num_paths, length
    ):
        exact[tuple(tokens.ravel().tolist())] = weight
        for j in range(num_paths):  # rows are the plain model rows along each path
            for d in range(length):
                np.testing.assert_array_equal(draft_probs[j, d], model.q(tokens[j, :d]))
            np.testing.assert_array_equal(target_probs[j, length], model.p(tokens[j]))
    assert abs(sum(exact.values()) - 1.0) <= TOL
    batch = en.sample_drafts(model, scheme, num_paths, length, num, np.random.default_rng(14))
    empirical = en.empirical_law(batch.draft_tokens.reshape(num, -1))
    assert set(empirical) <= set(exact)
    for key, prob in exact.items():
        sigma = np.sqrt(prob * (1 - prob) / num)
        assert abs(empirical.get(key, 0.0) - prob) <= 5 * sigma + 1e-9
    first = batch.draft_tokens[:, :, 0]
    same = first[:, :, None] == first[:, None, :]
    ids = batch.prefix_id[:, :, 1]
    np.testing.assert_array_equal(same, ids[:, :, None] == ids[:, None, :])


def test_complete_with_target_matches_joint():
    model = variant_model(2, 2, "dirichlet", seed=15)
    rng = np.random.default_rng(15)
    num = 20_000
    strings = en.complete_with_target(model, np.full((num, 3), -1), 3, rng)
    joint = en.target_joint(model, 3)
    empirical = en.empirical_law(strings)
    for key, prob in joint.items():
        assert abs(empirical.get(key, 0.0) - prob) <= 5 * np.sqrt(prob * (1 - prob) / num) + 1e-9
    prefixes = en.emitted_prefixes(np.array([[1, 0], [0, 1]]), np.array([2, 0]), np.array([1, 1]))
    np.testing.assert_array_equal(prefixes, [[1, 0, 1], [1, -1, -1]])
    completed = en.complete_with_target(model, prefixes, 3, rng)
    np.testing.assert_array_equal(completed[0], [1, 0, 1])
    assert completed[1, 0] == 1 and np.all(completed[1] >= 0)
