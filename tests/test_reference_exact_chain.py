"""Exact tests of the NumPy reference laws of the chain verifiers (greedy, token, block).

Losslessness by exact enumeration, golden values (both in docs/algorithms.md) and the
block-verification invariants.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from specjax.verify import reference as ref
from tests import enumeration as en
from tests.reference_exact_cases import TOL, VARIANTS, lossless_error, variant_model

CHAIN_SIZES = list(itertools.product((2, 3, 4), (1, 2, 3)))


# --------------------------------------------------------------------------------------------
# Losslessness by exact enumeration.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize(("vocab", "length"), CHAIN_SIZES)
@pytest.mark.parametrize("name", ["token", "block"])
def test_chain_lossless(name, vocab, length, variant):
    model = variant_model(vocab, length, variant, seed=1)
    assert lossless_error(model, name, "chain", 1, length) <= TOL


@pytest.mark.parametrize(("vocab", "length"), CHAIN_SIZES)
@pytest.mark.parametrize("q_variant", ["dirichlet", "q_zeros", "one_hot_q"])
def test_greedy_lossless_at_temperature_zero(vocab, length, q_variant):
    options = {"q_zeros": {"dirichlet": 0, "q_zeros": 1, "one_hot_q": vocab - 1}[q_variant]}
    model = en.random_model(
        np.random.default_rng([2, vocab, length]), vocab, length, one_hot_p=True, **options
    )
    assert lossless_error(model, "greedy", "chain", 1, length) <= TOL


# --------------------------------------------------------------------------------------------
# Golden values.
# --------------------------------------------------------------------------------------------

BV_TABLE = {  # L: (token E[tau], BV E[tau]), docs/algorithms.md, golden values
    1: (Fraction(2, 3), Fraction(2, 3)),
    2: (Fraction(10, 9), Fraction(11, 9)),
    3: (Fraction(38, 27), Fraction(5, 3)),
    4: (Fraction(130, 81), Fraction(166, 81)),
    5: (Fraction(422, 243), Fraction(64, 27)),
}


@pytest.mark.parametrize("length", list(BV_TABLE))
def test_bv_paper_table(length):
    model = en.bv_paper_model(length)
    token, block = BV_TABLE[length]
    assert abs(en.expected_accepted_tokens(model, "token", "chain", 1, length) - token) <= TOL
    assert abs(en.expected_accepted_tokens(model, "block", "chain", 1, length) - block) <= TOL
    assert abs(en.block_efficiency(model, "block", "chain", 1, length) - (1 + block)) <= TOL
    for name in ("token", "block"):
        assert lossless_error(model, name, "chain", 1, length) <= TOL


def test_context_dependent_example():
    model = en.context_dependent_example()
    token = en.expected_accepted_tokens(model, "token", "chain", 1, 2)
    block = en.expected_accepted_tokens(model, "block", "chain", 1, 2)
    assert abs(token - Fraction(13, 10)) <= TOL
    assert abs(block - Fraction(57, 40)) <= TOL
    for name in ("token", "block"):
        assert lossless_error(model, name, "chain", 1, 2) <= TOL


# --------------------------------------------------------------------------------------------
# Invariants.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_block_never_worse_than_token(seed):
    rng = np.random.default_rng([7, seed])
    vocab, length = (3, 3) if seed % 2 else (4, 2)
    model = en.random_model(rng, vocab, length, alpha=0.5 + seed % 3, q_zeros=seed % 2)
    token = en.expected_accepted_tokens(model, "token", "chain", 1, length)
    block = en.expected_accepted_tokens(model, "block", "chain", 1, length)
    assert block >= token - TOL


def test_block_last_success_wins():
    """The BV example with x = (a, b): position 1's stop test always fails, yet tau = 2 surely."""
    model = en.bv_paper_model(2)
    tokens = np.array([0, 1])
    draft_probs = np.stack([model.q(()), model.q((0,))])
    target_probs = np.stack([model.p(()), model.p((0,)), model.p((0, 1))])
    w, h = ref.block_weights_and_stops(tokens, draft_probs, target_probs)
    np.testing.assert_allclose(w, [1.0, 0.5, 1.0], atol=TOL)
    np.testing.assert_allclose(h, [1.0, 0.0, 1.0], atol=TOL)
    block = ref.block_law(tokens, draft_probs, target_probs)
    assert abs(sum(prob for (tau, _, _), prob in block.items() if tau == 2) - 1.0) <= TOL
    token = ref.token_law(tokens, draft_probs, target_probs)
    assert abs(sum(prob for (tau, _, _), prob in token.items() if tau == 0) - 0.5) <= TOL


@pytest.mark.parametrize("seed", range(5))
def test_block_weights_closed_form(seed):
    """Sequential w recurrence == exp(S_i - max_{j<=i} S_j) with S the cumulative log ratio."""
    rng = np.random.default_rng([10, seed])
    vocab, length = 5, 6
    model = en.random_model(rng, vocab, length, alpha=0.7, p_zeros=seed % 2)
    batch = en.sample_drafts(model, "chain", 1, length, 20, rng)
    for tokens, draft_probs, target_probs in zip(
        batch.draft_tokens, batch.draft_probs, batch.target_probs, strict=True
    ):
        w, _ = ref.block_weights_and_stops(tokens, draft_probs, target_probs)
        with np.errstate(divide="ignore"):
            log_ratio = np.log(target_probs[np.arange(length), tokens]) - np.log(
                draft_probs[np.arange(length), tokens]
            )
        s = np.concatenate([[0.0], np.cumsum(log_ratio)])
        with np.errstate(invalid="ignore"):
            closed = np.exp(s - np.maximum.accumulate(s))
        np.testing.assert_allclose(w, closed, rtol=1e-12, atol=0)
