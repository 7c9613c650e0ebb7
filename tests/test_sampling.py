"""Sampling at the edges of its parameters: tiny temperatures behave as their limit (never NaN),
top-k beyond the vocabulary keeps everything, top-k and top-p keep the documented tokens (by
hand, and against an independent NumPy statement), and the inverse-CDF sampler draws the law."""

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


def reference_law(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """An independent NumPy statement of the documented processing of one row: softmax at the
    temperature, then the tokens at least as likely as the k-th kept (ties kept), then the
    smallest set of most likely tokens whose mass reaches top_p (ties at the cut kept)."""
    x = logits.astype(np.float64) / temperature
    p = np.exp(x - x.max())
    p /= p.sum()
    if 0 < top_k < len(p):
        p = np.where(p >= np.sort(p)[::-1][top_k - 1], p, 0.0)
        p /= p.sum()
    if top_p < 1.0:
        order = np.sort(p)[::-1]
        reach = int(np.argmax(np.cumsum(order) >= top_p))  # first prefix whose mass reaches it
        p = np.where(p >= order[reach], p, 0.0)
        p /= p.sum()
    return p


HALVES = np.log(np.array([0.5, 0.25, 0.125, 0.125]))


@pytest.mark.parametrize(
    "top_k,top_p,want",
    [
        (1, 1.0, [1, 0, 0, 0]),
        (2, 1.0, [2 / 3, 1 / 3, 0, 0]),
        (3, 1.0, [0.5, 0.25, 0.125, 0.125]),  # the 3rd and 4th tie: both kept
        (0, 0.499, [1, 0, 0, 0]),
        (0, 0.501, [2 / 3, 1 / 3, 0, 0]),  # 0.5 does not reach 0.501: the next token joins
        (0, 0.749, [2 / 3, 1 / 3, 0, 0]),
        (0, 0.751, [0.5, 0.25, 0.125, 0.125]),  # the cut falls in a tie: both kept
        (2, 0.7, [2 / 3, 1 / 3, 0, 0]),  # top-k first, then top-p of what is left
        (2, 0.6, [1, 0, 0, 0]),  # of [2/3, 1/3], 2/3 alone reaches 0.6
    ],
)
def test_top_k_and_top_p_keep_the_documented_tokens(top_k, top_p, want):
    got = probs_from_logits(jnp.asarray(HALVES), SamplingParams(1.0, top_k=top_k, top_p=top_p))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-6)
    np.testing.assert_allclose(reference_law(HALVES, 1.0, top_k, top_p), want, atol=1e-12)


def test_processed_laws_equal_an_independent_reference_on_random_rows():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(200, 12)) * 2.0
    logits[:50, :6] = np.round(logits[:50, :6])  # ties
    for temperature, top_k, top_p in [(0.7, 3, 1.0), (1.0, 0, 0.8), (1.3, 5, 0.6), (1.0, 1, 0.3)]:
        params = SamplingParams(temperature, top_k=top_k, top_p=top_p)
        got = np.asarray(probs_from_logits(jnp.asarray(logits, jnp.float32), params))
        want = np.stack([reference_law(row, temperature, top_k, top_p) for row in logits])
        np.testing.assert_array_equal(got > 0, want > 0)  # the same tokens kept
        np.testing.assert_allclose(got, want, atol=2e-6)
