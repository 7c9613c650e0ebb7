"""The verifiers' fast paths equal the plain operations they replace, bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.verify.gbv import kappa_order


def keys_with_ties(rng, batch: int, vocab: int) -> np.ndarray:
    """Ranking keys with exact ties, zeros and +inf, as GBV's p/q produces them."""
    kappa = rng.gamma(0.5, size=(batch, vocab))
    kappa[:, : vocab // 3] = np.round(kappa[:, : vocab // 3], 1)  # many exact ties
    kappa[:, rng.integers(0, vocab, vocab // 8)] = np.inf  # q = 0 < p
    kappa[:, rng.integers(0, vocab, vocab // 8)] = 0.0  # p = 0
    return kappa


@pytest.mark.parametrize("vocab", [1, 2, 5, 300, 70_000])
def test_kappa_order_is_the_stable_argsort(vocab):
    rng = np.random.default_rng(vocab)
    kappa = jnp.asarray(keys_with_ties(rng, 3, vocab), jnp.float32)
    want = jnp.argsort(kappa, axis=-1, stable=True)
    np.testing.assert_array_equal(jax.jit(kappa_order)(kappa), want)


def test_kappa_order_in_float64():
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        kappa = jnp.asarray(keys_with_ties(rng, 2, 1000), jnp.float64)
        kappa = kappa.at[:, 7].set(1.0 + 2.0**-50)  # differs from 1.0 only in float64
        want = jnp.argsort(kappa, axis=-1, stable=True)
        np.testing.assert_array_equal(jax.jit(kappa_order)(kappa), want)
