"""Sampling at the edges of its parameters: tiny temperatures behave as their limit (never NaN),
top-k beyond the vocabulary keeps everything, and the inverse-CDF sampler draws the law."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.sampling import SamplingParams, greedy_token, probs_from_logits, sample

LOGITS = jnp.array([[1.0, 3.0, 3.0, -2.0], [0.5, 0.25, 0.0, 0.1], [-1e30, 0.0, 5.0, 5.0]])


@pytest.mark.parametrize("temperature", [1e-45, 1e-30, 1e-8, 1e-3])
def test_tiny_temperatures_tend_to_uniform_over_the_maxima(temperature):
    probs = np.asarray(probs_from_logits(LOGITS, SamplingParams(temperature)))
    assert np.all(np.isfinite(probs))
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(probs[0], [0, 0.5, 0.5, 0], atol=1e-6)
    np.testing.assert_allclose(probs[1], [1, 0, 0, 0], atol=1e-6)
    np.testing.assert_allclose(probs[2], [0, 0, 0.5, 0.5], atol=1e-6)


def test_top_k_beyond_the_vocabulary_keeps_every_token():
    full = probs_from_logits(LOGITS, SamplingParams(1.0))
    np.testing.assert_array_equal(probs_from_logits(LOGITS, SamplingParams(1.0, top_k=10**6)), full)


def test_greedy_token_is_the_first_maximum():
    np.testing.assert_array_equal(greedy_token(LOGITS), [1, 0, 2])
    one_hot = probs_from_logits(LOGITS, SamplingParams(0.0))
    np.testing.assert_array_equal(sample(jax.random.key(0), one_hot), [1, 0, 2])


def test_sample_draws_the_law():
    probs = jnp.array([0.1, 0.0, 0.6, 0.3])
    rows = jnp.broadcast_to(probs, (40_000, 4))
    draws = np.asarray(sample(jax.random.key(1), rows))
    freq = np.bincount(draws, minlength=4) / len(draws)
    assert freq[1] == 0  # zero-probability tokens are never drawn
    np.testing.assert_allclose(freq, probs, atol=0.01)  # 4 sigma at n = 40k
