"""The verifiers' fast paths equal the plain operations they replace, bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verify
from specjax.verify import gbv, rows
from specjax.verify.gbv import kappa_order
from specjax.verify.spectr import spectr_rho


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
    # Both forms: one 64-bit sort (CPU, GPU) and the digit passes (other platforms).
    np.testing.assert_array_equal(jax.jit(gbv.kappa_order_packed)(kappa), want)
    np.testing.assert_array_equal(jax.jit(gbv.kappa_order_digits)(kappa), want)
    batched = jnp.stack([kappa, kappa[::-1]])  # [2, 3, V]: leading axes are rows too
    np.testing.assert_array_equal(jax.jit(kappa_order)(batched)[1], want[::-1])


@pytest.mark.parametrize("platform, sorts, words", [("cuda", 1, "ui64"), ("tpu", 2, "ui32")])
def test_kappa_order_lowers_for_each_platform(platform, sorts, words):
    """The platform branches lower without that hardware: one 64-bit sort on GPU, the 32-bit
    digit passes on TPU (2 for V <= 2^16)."""
    kappa = jnp.ones((2, 1000), jnp.float32)
    text = jax.jit(kappa_order).trace(kappa).lower(lowering_platforms=(platform,)).as_text()
    assert text.count("stablehlo.sort") == sorts
    assert f"tensor<2x1000x{words}>" in text


def test_kappa_order_in_float64():
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        kappa = jnp.asarray(keys_with_ties(rng, 2, 1000), jnp.float64)
        kappa = kappa.at[:, 7].set(1.0 + 2.0**-50)  # differs from 1.0 only in float64
        want = jnp.argsort(kappa, axis=-1, stable=True)
        np.testing.assert_array_equal(jax.jit(kappa_order)(kappa), want)


def bisection_rho(p, q, k, steps=60):
    """SpecTr's rho* by plain bisection (the definition spectr_rho's Newton passes replace)."""
    lo, hi = np.ones_like(k), np.maximum(k, 1.0)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        beta = np.clip(np.minimum(q, p / mid[:, None]).sum(-1), 0.0, 1.0)
        valid = 1.0 - (1.0 - beta) ** k <= mid * beta
        lo, hi = np.where(valid, lo, mid), np.where(valid, mid, hi)
    return hi


def test_spectr_rho_equals_bisection_at_a_large_vocabulary():
    rng = np.random.default_rng(4)
    v = 5000
    p = rng.dirichlet(np.full(v, 0.05), size=8)
    q = rng.dirichlet(np.full(v, 0.05), size=8)
    q[1] = p[1]  # p == q: rho* = 1
    q[2, : v // 2] = 0.0  # zeros
    q[2] /= q[2].sum()
    k = np.array([0, 2, 3, 4, 8, 2, 5, 1], np.float64)
    with jax.enable_x64(True):
        rho = np.asarray(spectr_rho(jnp.asarray(p), jnp.asarray(q), jnp.asarray(k)))
    np.testing.assert_allclose(rho, bisection_rho(p, q, k), rtol=0, atol=1e-8 * k.max())
    assert rho[0] == rho[7] == 1.0


def test_spectr_rho_has_no_loop_inside_its_passes():
    """Each pass over V finds its local model's root in a few vectorised steps; a loop inside
    the passes (a scalar bisection: 60 dependent tiny kernels per pass) made SpecTr ~10x slower
    than SpecInfer at B = 1 on an H100."""
    p = jnp.full((2, 100), 0.01)
    compiled = jax.jit(spectr_rho).lower(p, p, jnp.array([2, 3])).compile().as_text()
    assert compiled.count(" while(") == 1  # the passes over V


@pytest.mark.parametrize(
    "batch, row_bytes, budget, expected",
    [
        (64, 1000, 4000, 4),  # four rows fit
        (64, 10**7, 4000, 2),  # no row fits: chunks of two, not one
        (7, 10**7, 4000, 7),  # a prime batch larger than the budget runs whole
        (6, 1000, 10**9, 6),  # everything fits: one chunk
        (1, 10**7, 4000, 1),
    ],
)
def test_chunk_rows(batch, row_bytes, budget, expected):
    assert rows.chunk_rows(batch, row_bytes, budget) == expected


@pytest.mark.parametrize("name", ["token", "block", "specinfer", "spectr", "gbv"])
def test_row_chunks_leave_every_verifier_output_unchanged(name, monkeypatch):
    """The CPU path (chunks of 2 rows through lax.map) returns exactly the batched result."""
    rng = np.random.default_rng(3)
    b, k, l, v = 6, 3, 3, 40
    q = rng.dirichlet(np.full(v, 0.5), size=(b, k, l)).astype(np.float32)
    p = rng.dirichlet(np.full(v, 0.5), size=(b, k, l + 1)).astype(np.float32)
    tokens = rng.integers(0, v, size=(b, k, l)).astype(np.int32)
    num_draft = rng.integers(0, l + 1, size=(b, k)).astype(np.int32)
    if name in ("token", "block"):
        args = (tokens[:, 0], q[:, 0], p[:, 0])
        num_draft = num_draft[:, 0]
    else:
        args = (tokens, q, p)
    f = verify.get(name)
    outs = []
    for budget in (1 << 40, 1):  # one chunk, then chunks of two rows
        monkeypatch.setattr(rows, "CHUNK_BYTES", budget)
        keys = jax.random.split(jax.random.PRNGKey(0), 8)
        run = jax.jit(lambda key: f(key, *args, num_draft=num_draft))
        outs.append(np.stack([np.stack(run(key)) for key in keys]))
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_every_verifier_lowers_for_accelerators(platform):
    """No GPU or TPU here: every verifier still lowers for them (the platform-dependent
    branches of row chunking and GBV's order are traced for that platform only)."""
    rng = np.random.default_rng(4)
    b, k, l, v = 4, 2, 3, 512
    q = rng.dirichlet(np.full(v, 0.5), size=(b, k, l)).astype(np.float32)
    p = rng.dirichlet(np.full(v, 0.5), size=(b, k, l + 1)).astype(np.float32)
    tokens = rng.integers(0, v, size=(b, k, l)).astype(np.int32)
    for name in verify.CHAIN_VERIFIERS | verify.MULTIPATH_VERIFIERS:
        chain = name in verify.CHAIN_VERIFIERS
        args = (tokens[:, 0], q[:, 0], p[:, 0]) if chain else (tokens, q, p)
        traced = jax.jit(verify.get(name)).trace(jax.random.key(0), *args)
        text = traced.lower(lowering_platforms=(platform,)).as_text()
        assert "func.func public @main" in text, name


def test_invalid_laws_is_the_entrywise_test():
    """Two plain reductions (sum, minimum) give the verdict of the entrywise test (a NaN, an
    infinity or a negative entry; -0.0 is not negative) on rows holding each of them."""
    from specjax.verify import common

    rng = np.random.default_rng(5)
    v = 1000
    q = rng.dirichlet(np.full(v, 0.3), size=(9, 2)).astype(np.float32)  # [9, 2, V]
    for row, value in enumerate([np.nan, np.inf, -np.inf, -1e-30, -0.0, 0.0, 1e-45, 3.0]):
        q[row, 0, rng.integers(v)] = value
    q[8, 1, :] = np.nan
    want = ~np.all((q >= 0) & (q < np.inf), axis=-1)
    np.testing.assert_array_equal(jax.jit(common.invalid_laws)(q), want)
    assert want[:4, 0].all() and not want[4:8, 0].any() and want[8, 1]


@pytest.mark.parametrize("vocab", [1, 7, 300, 4096, 49152, 128256, 151936])
@pytest.mark.parametrize("reread", [False, True])
def test_argmax_first_is_argmax(vocab, reread):
    """The two-level argmax (blocks of a divisor of V up to 4096, or 256 with padding) is
    ``jnp.argmax``: the first maximal index, also among ties and -inf."""
    from specjax.verify import common

    rng = np.random.default_rng(vocab)
    x = rng.integers(0, 40, size=(4, 3, vocab)).astype(np.float32)  # many ties
    x[0, 0] = -np.inf
    x[1, 1, -1] = 1e9
    x[2, 2, 0] = 1e9
    got = jax.jit(lambda x: common.argmax_first(x, reread=reread))(x)
    np.testing.assert_array_equal(got, jnp.argmax(x, axis=-1))


def plain_sample_with(u, weights, fallback):
    """``common.sample_with`` as first written: the full row's mass decides emptiness."""
    from specjax.verify import common

    weights = jnp.maximum(weights, 0.0)
    empty = jnp.sum(weights, axis=-1, keepdims=True) <= 0.0
    weights = jnp.where(empty, jnp.maximum(fallback, 0.0), weights)
    blocks, c = common.row_blocks(weights, 0.0)
    j = common.inverse_cdf(jnp.sum(blocks, axis=-1), u[:, 0])
    inner = jnp.take_along_axis(blocks, j[:, None, None], axis=1)[:, 0]
    return (j * c + common.inverse_cdf(inner, u[:, 1])).astype(jnp.int32)


@pytest.mark.parametrize("vocab", [1, 300, 4096])
def test_sample_with_is_the_plain_sampler(vocab):
    """Emptiness from the block sums (the fallback summed only when a row needs it) draws what
    the full-row test draws: rows with no positive weight, negative weights, -0.0, NaN, +inf,
    an empty fallback, and batches with and without an empty row."""
    from specjax.verify import common

    rng = np.random.default_rng(vocab)
    for trial in range(6):
        w = rng.standard_normal((12, vocab)).astype(np.float32)
        w[rng.random(w.shape) < 0.5] = 0.0
        fallback = rng.random(w.shape).astype(np.float32)
        if trial % 2:
            w[::3] = -np.abs(w[::3])  # no positive weight
            w[1::4] = -0.0
            fallback[::6] = 0.0
        else:
            w = np.abs(w) + 1e-3
        w[5, 0] = np.nan if trial == 2 else w[5, 0]
        w[6, -1] = np.inf if trial == 4 else w[6, -1]
        u = rng.random((12, 2)).astype(np.float32)
        u[0] = 0.0
        u[1] = np.nextafter(np.float32(1), np.float32(0))
        got = jax.jit(common.sample_with)(u, w, fallback)
        np.testing.assert_array_equal(got, jax.jit(plain_sample_with)(u, w, fallback))


def test_block_weights_check_the_laws_in_their_pass():
    """Block verification's Z pass is the law check too: Z is NaN exactly at the rows that are
    no law, and elsewhere the plain sum of the excess, bit for bit."""
    from specjax.verify import block, common

    rng = np.random.default_rng(6)
    b, l, v = 6, 4, 500
    q = rng.dirichlet(np.full(v, 0.3), size=(b, l)).astype(np.float32)
    p = rng.dirichlet(np.full(v, 0.3), size=(b, l + 1)).astype(np.float32)
    tokens = rng.integers(0, v, size=(b, l)).astype(np.int32)
    q[0, 1, 3], q[1, 0, :], q[2, 3, 7], q[3, 2, 9], q[4, 1, 0] = np.nan, np.nan, np.inf, -0.5, -0.0
    log_w, z = jax.jit(block.block_weights)(tokens, q, p)
    bad = np.asarray(common.invalid_laws(q))
    np.testing.assert_array_equal(np.isnan(z), bad)

    def plain(log_w, p, q):  # Z as block verification computed it before the fused check
        wp = jnp.exp(log_w[:, :l])[:, :, None] * p[:, :l]
        return jnp.sum(jnp.where(wp > q, wp - q, 0.0), axis=-1)

    plain = jax.jit(plain)(log_w, p, q)
    np.testing.assert_array_equal(np.asarray(z)[~bad], np.asarray(plain)[~bad])


@pytest.mark.parametrize("vocab", [1, 300, 4096])
def test_argmax_product_is_the_argmax_of_the_product(vocab):
    """``common.argmax_product(a, b)`` is the first maximal index of ``a * b``: zeros, ties,
    large weights."""
    from specjax.verify import common

    rng = np.random.default_rng(vocab)
    a = rng.integers(0, 5, size=(4, 3, vocab)).astype(np.float32) / 4  # zeros and ties
    b = rng.integers(1, 4, size=(4, 3, vocab)).astype(np.float32)
    b[0, 0, -1] = 1e30
    got = jax.jit(common.argmax_product)(a, b)
    np.testing.assert_array_equal(got, np.argmax(a * b, axis=-1))
