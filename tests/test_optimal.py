"""Tests of the optimal multi-draft acceptance rate (docs/algorithms.md; Hu et al. 2502.18779)."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.verify.optimal import optimal_acceptance
from specjax.verify.optimal_reference import draft_tuple_law, optimal_acceptance_bruteforce

# docs/algorithms.md, golden values: (p, q, k, OPT with, OPT without replacement), 4 decimals.
TABLE = [
    ((0.4, 0.3, 0.2, 0.1), (0.1, 0.2, 0.3, 0.4), 2, 0.7900, 0.8345),
    ((0.6, 0.2, 0.1, 0.1), (0.25, 0.25, 0.25, 0.25), 2, 0.8375, 0.9000),
    ((0.6, 0.2, 0.1, 0.1), (0.25, 0.25, 0.25, 0.25), 3, 0.9781, 1.0000),
    ((0.5, 0.3, 0.2), (0.2, 0.3, 0.5), 2, 0.8600, 0.9857),
]

PAD_V = 8  # small cases (V <= 8) are embedded in 8 tokens (the rest p = q = 0)
PAD_ROWS = 64  # and batched in multiples of 64 rows

_jitted = jax.jit(optimal_acceptance, static_argnums=(2, 3))


def _random_case(rng: np.random.Generator, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Dirichlet p, q with occasional exact zeros, equal ratios (ties) and p == q tokens."""
    p = rng.dirichlet(np.full(vocab, rng.choice([0.3, 1.0, 3.0])))
    q = rng.dirichlet(np.full(vocab, rng.choice([0.3, 1.0, 3.0])))
    if rng.random() < 0.4:  # q with exact zeros (keep >= 1 positive)
        zero = rng.choice(vocab, size=rng.integers(1, vocab), replace=False)
        q[zero] = 0.0
    if rng.random() < 0.3:  # p with exact zeros
        zero = rng.choice(vocab, size=rng.integers(1, vocab), replace=False)
        p[zero] = 0.0
    if rng.random() < 0.3 and vocab >= 2:  # a tie in p/q: two identical tokens
        i, j = rng.choice(vocab, size=2, replace=False)
        p[j], q[j] = p[i], q[i]
    if rng.random() < 0.2:  # some tokens with p == q
        same = rng.choice(vocab, size=rng.integers(1, vocab + 1), replace=False)
        p[same] = q[same]
    if p.sum() == 0:
        p[rng.integers(vocab)] = 1.0
    if q.sum() == 0:
        q[rng.integers(vocab)] = 1.0
    return p / p.sum(), q / q.sum()


def _padded(p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Embeds a case in PAD_V tokens at random positions; the others get p = q = 0."""
    pos = np.sort(rng.choice(PAD_V, size=p.shape[0], replace=False))
    pp, qq = np.zeros(PAD_V), np.zeros(PAD_V)
    pp[pos], qq[pos] = p, q
    return pp, qq


def _random_cases(seed: int, count: int) -> list[tuple[np.ndarray, np.ndarray, int]]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        vocab = int(rng.integers(2, 8))
        p, q = _random_case(rng, vocab)
        cases.append((p, q, int(rng.integers(1, 5))))
    return cases


def _batched(cases, dtype, replacement):
    """optimal_acceptance on cases (p, q, n) of V <= PAD_V, one jitted call per n.

    Tokens are padded to PAD_V (p = q = 0 at random positions) and rows to a multiple of
    PAD_ROWS, so that every test shares the same few compilations. Returns ``[len(cases)]``.
    """
    rng = np.random.default_rng(123)
    out = np.full(len(cases), np.nan)
    for n in sorted({c[2] for c in cases}):
        idx = [i for i, c in enumerate(cases) if c[2] == n]
        padded = [_padded(cases[i][0], cases[i][1], rng) for i in idx]
        rows = -(-len(idx) // PAD_ROWS) * PAD_ROWS
        p = np.full((rows, PAD_V), 1 / PAD_V)
        q = np.full((rows, PAD_V), 1 / PAD_V)
        p[: len(idx)] = [a for a, _ in padded]
        q[: len(idx)] = [b for _, b in padded]
        got = _jitted(p.astype(dtype), q.astype(dtype), n, replacement)
        out[idx] = np.asarray(got, dtype=np.float64)[: len(idx)]
    return out


def _feasible(q: np.ndarray, n: int, replacement: bool) -> bool:
    return replacement or n <= int((q > 0).sum())


@pytest.fixture(scope="module")
def random_cases():
    """>= 100 random small cases with their brute-force optima for both sampling methods."""
    cases = _random_cases(seed=0, count=180)
    ref = {}
    for replacement in (True, False):
        kept = [c for c in cases if _feasible(c[1], c[2], replacement)]
        ref[replacement] = (
            kept,
            np.array([optimal_acceptance_bruteforce(p, q, n, replacement) for p, q, n in kept]),
        )
    return ref


# ----------------------------------------------------------------------------- golden values


@pytest.mark.parametrize("p, q, n, opt_with, opt_without", TABLE)
def test_table_opt_columns(p, q, n, opt_with, opt_without):
    p, q = np.array(p), np.array(q)
    for replacement, expected in ((True, opt_with), (False, opt_without)):
        brute = optimal_acceptance_bruteforce(p, q, n, replacement)
        assert brute == pytest.approx(expected, abs=5e-5)
        got = _batched([(p, q, n)], np.float32, replacement)[0]
        assert got == pytest.approx(expected, abs=5e-5)


@pytest.mark.parametrize("replacement", [True, False])
def test_one_draft_is_one_minus_tv(replacement):
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(50), size=16)
    q = rng.dirichlet(np.ones(50), size=16)
    q[:, :5] = 0.0
    q /= q.sum(1, keepdims=True)
    expected = 1.0 - 0.5 * np.abs(p - q).sum(1)
    got = np.asarray(optimal_acceptance(p.astype(np.float32), q.astype(np.float32), 1, replacement))
    np.testing.assert_allclose(got, expected, atol=1e-6)
    for _ in range(4):  # the brute force agrees on small rows
        p_row, q_row = _random_case(rng, 6)
        tv = 0.5 * np.abs(p_row - q_row).sum()
        assert optimal_acceptance_bruteforce(p_row, q_row, 1, replacement) == pytest.approx(1 - tv)


# ------------------------------------------------------------------ JAX == brute force


@pytest.mark.parametrize("replacement", [True, False])
def test_matches_bruteforce_random(random_cases, replacement):
    cases, ref = random_cases[replacement]
    assert len(cases) >= 100
    with jax.enable_x64(True):
        got64 = _batched(cases, np.float64, replacement)
    got32 = _batched(cases, np.float32, replacement)
    err64, err32 = np.abs(got64 - ref).max(), np.abs(got32 - ref).max()
    print(f"replacement={replacement}: {len(cases)} cases, max abs err {err64:.1e} / {err32:.1e}")
    assert err64 <= 1e-8
    assert err32 <= 1e-6


def test_without_replacement_wide_scales():
    """Draft probabilities spanning many decades (the hardest regime of the quadrature)."""
    rng = np.random.default_rng(7)
    cases = []
    for i in range(24):
        p = rng.dirichlet(np.ones(7))
        q = rng.dirichlet(np.ones(7)) * 10.0 ** -rng.uniform(0, 30, 7)
        cases.append((p, q / q.sum(), 2 + i % 3))
    refs = [optimal_acceptance_bruteforce(p, q, n, False) for p, q, n in cases]
    with jax.enable_x64(True):
        got = _batched(cases, np.float64, False)
    np.testing.assert_allclose(got, refs, atol=1e-8)


def test_without_replacement_at_least_with_replacement(random_cases):
    cases, _ = random_cases[False]
    with jax.enable_x64(True):
        without = _batched(cases, np.float64, False)
        with_ = _batched(cases, np.float64, True)
    assert np.all(without >= with_ - 1e-9)
    assert np.mean(without > with_ + 1e-6) > 0.3  # strictly better on many cases
    for p, q, n in cases[:30]:
        brute_without = optimal_acceptance_bruteforce(p, q, n, False)
        assert brute_without >= optimal_acceptance_bruteforce(p, q, n, True) - 1e-12


# ------------------------------------------------------------------ brute force == LP


def _lp_optimum(p: np.ndarray, q: np.ndarray, n: int, replacement: bool) -> float:
    """max P(Y in drafts) over couplings pi(tuple, y) with marginals (Q, p), by linprog."""
    from scipy.optimize import linprog

    law = draft_tuple_law(q, n, replacement)
    tuples, vocab = list(law), p.shape[0]
    num = len(tuples) * vocab  # variable (i, y) at index i * vocab + y
    gain = np.array([float(y in t) for t in tuples for y in range(vocab)])
    a_eq = np.zeros((len(tuples) + vocab, num))
    for i in range(len(tuples)):
        a_eq[i, i * vocab : (i + 1) * vocab] = 1.0
    for y in range(vocab):
        a_eq[len(tuples) + y, y::vocab] = 1.0
    b_eq = np.concatenate([np.array([law[t] for t in tuples]), p])
    res = linprog(-gain, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    assert res.status == 0, res.message
    return -res.fun


def test_bruteforce_matches_lp():
    pytest.importorskip("scipy")
    rng = np.random.default_rng(5)
    checked = 0
    while checked < 12:
        vocab = int(rng.integers(2, 5))
        n = int(rng.integers(1, 4))
        p, q = _random_case(rng, vocab)
        for replacement in (True, False):
            if not _feasible(q, n, replacement):
                continue
            lp = _lp_optimum(p, q, n, replacement)
            assert optimal_acceptance_bruteforce(p, q, n, replacement) == pytest.approx(
                lp, abs=1e-9
            )
        checked += 1


def test_draft_tuple_law_sums_to_one():
    q = np.array([0.5, 0.0, 0.3, 0.2])
    for replacement in (True, False):
        law = draft_tuple_law(q, 3, replacement)
        assert sum(law.values()) == pytest.approx(1.0)
        assert all(1 not in t for t in law)
    assert len(draft_tuple_law(q, 3, False)) == 6  # 3! orderings of the 3-token support
    with pytest.raises(ValueError):
        draft_tuple_law(q, 4, False)


# ------------------------------------------------------------------ jit / vmap / scale


@pytest.mark.parametrize("replacement", [True, False])
def test_jit_and_vmap(replacement):
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(10), size=(3, 5)).astype(np.float32)  # [A, B, V]
    q = rng.dirichlet(np.ones(10), size=(3, 5)).astype(np.float32)
    eager = np.stack([np.asarray(optimal_acceptance(p[a], q[a], 3, replacement)) for a in range(3)])
    jitted = jax.jit(optimal_acceptance, static_argnums=(2, 3))
    np.testing.assert_allclose(np.asarray(jitted(p[0], q[0], 3, replacement)), eager[0], atol=1e-6)
    vmapped = jax.vmap(lambda a, b: optimal_acceptance(a, b, 3, replacement))(p, q)
    np.testing.assert_allclose(np.asarray(vmapped), eager, atol=1e-6)
    lead = optimal_acceptance(p, q, 3, replacement)  # extra leading dims [A, B, V] -> [A, B]
    assert lead.shape == (3, 5)
    np.testing.assert_allclose(np.asarray(lead), eager, atol=1e-6)


@pytest.mark.parametrize("replacement", [True, False])
def test_realistic_size(replacement):
    rng = np.random.default_rng(4)
    b, v, n = 4, 32000, 4
    logits_p = rng.standard_normal((b, v)) * 3.0
    logits_q = logits_p + rng.standard_normal((b, v))
    p = jax.nn.softmax(jnp.asarray(logits_p, jnp.float32), axis=-1)
    q = jax.nn.softmax(jnp.asarray(logits_q, jnp.float32), axis=-1)
    fn = jax.jit(lambda a, c: optimal_acceptance(a, c, n, replacement))
    start = time.perf_counter()
    fn(p, q).block_until_ready()
    compiled = time.perf_counter()
    out = np.asarray(fn(p, q).block_until_ready())
    end = time.perf_counter()
    print(
        f"B={b} V={v} n={n} replacement={replacement}: compile+run {compiled - start:.2f}s, "
        f"run {end - compiled:.3f}s, alpha*={out}"
    )
    assert out.shape == (b,)
    assert np.all(np.isfinite(out)) and np.all((out >= 0) & (out <= 1))
    one_minus_tv = 1 - 0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum(-1)
    assert np.all(out >= one_minus_tv - 1e-5)  # n drafts can only help


def test_float32_matches_float64_medium_vocab():
    """float32 keeps ~1e-7 accuracy on a thousand tokens (no sqrt(V) rounding growth)."""
    rng = np.random.default_rng(6)
    logits_p = rng.standard_normal((2, 1000)) * np.array([[2.0], [5.0]])
    logits_q = logits_p + rng.standard_normal((2, 1000))
    p = np.exp(logits_p - logits_p.max(1, keepdims=True))
    q = np.exp(logits_q - logits_q.max(1, keepdims=True))
    p, q = p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)
    for replacement in (True, False):
        with jax.enable_x64(True):
            ref = np.asarray(_jitted(p, q, 4, replacement))
        got = np.asarray(
            optimal_acceptance(p.astype(np.float32), q.astype(np.float32), 4, replacement)
        )
        np.testing.assert_allclose(got, ref, atol=1e-6)


# ------------------------------------------------------------------ degenerate rows


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_degenerate_rows(replacement, n):
    v = 5
    uniform = np.full(v, 1 / v)
    one_hot = np.eye(v)[2]
    q_zeros = np.array([0.5, 0.0, 0.3, 0.0, 0.2])
    p_zeros = np.array([0.0, 0.6, 0.0, 0.4, 0.0])
    rows = [
        (uniform, uniform),  # p == q
        (q_zeros, q_zeros),  # p == q with zeros
        (one_hot, uniform),  # one-hot p
        (p_zeros, q_zeros),  # disjoint supports -> 0
        (uniform, q_zeros),  # q with zeros
        (p_zeros, uniform),  # p with zeros
        (one_hot, one_hot),  # one-hot p == q (without replacement only n = 1 is feasible)
        (np.zeros(v), uniform),  # p = 0 (invalid, but no NaN)
    ]
    got = _batched([(pr, qr, n) for pr, qr in rows], np.float32, replacement)
    assert np.all(np.isfinite(got)) and np.all((got >= 0) & (got <= 1))
    assert got[0] == pytest.approx(1.0, abs=1e-6)
    assert got[1] == pytest.approx(1.0, abs=1e-6)
    assert got[3] == pytest.approx(0.0, abs=1e-6)
    for i, (pr, qr) in enumerate(rows[:6]):
        if _feasible(qr, n, replacement):
            expected = optimal_acceptance_bruteforce(pr, qr, n, replacement)
            assert got[i] == pytest.approx(expected, abs=1e-6), i
    if replacement or n == 1:
        assert got[6] == pytest.approx(1.0, abs=1e-6)


def test_q_all_zero_and_tiny_values_no_nan():
    p = np.array([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [1.0, 0.0, 0.0]], np.float32)
    q = np.array([[0.0, 0.0, 0.0], [1.0, 1e-40, 1e-30], [1.0 - 2e-30, 1e-30, 1e-30]], np.float32)
    for replacement in (True, False):
        got = np.asarray(optimal_acceptance(p, q, 2, replacement))
        assert np.all(np.isfinite(got)) and np.all((got >= 0) & (got <= 1))


# ------------------------------------------------------------------ errors


def test_shape_and_argument_errors():
    p = jnp.full((2, 4), 0.25)
    with pytest.raises(ValueError, match=r"\(2, 4\).*\(2, 5\)"):
        optimal_acceptance(p, jnp.full((2, 5), 0.2), 2)
    with pytest.raises(ValueError, match="num_drafts"):
        optimal_acceptance(p, p, 0)
    with pytest.raises(ValueError, match="without replacement"):
        optimal_acceptance(p, p, 5, replacement=False)
    assert optimal_acceptance(p, p, 5, replacement=True).shape == (2,)


def test_closed_form_acceptance_equals_enumeration_and_stays_below_the_optimum():
    """``specjax.verify.acceptance``: each verifier's single-step rate in closed form equals the
    enumeration of every draft tuple through the reference laws, and none exceeds alpha*."""
    from specjax.verify import acceptance

    rng = np.random.default_rng(3)
    for _ in range(3):
        p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4) * 0.7)
        for n in (1, 2, 3):
            fast, slow = acceptance.acceptance(p, q, n), acceptance.reference_acceptance(p, q, n)
            assert set(fast) == set(acceptance.VERIFIERS)
            for name in fast:
                assert abs(fast[name] - slow[name]) < 1e-12, (name, n, fast[name], slow[name])
            best = float(optimal_acceptance(jnp.asarray(p), jnp.asarray(q), n, True))
            assert fast["specinfer w/ repl."] <= best + 1e-6 and fast["spectr"] <= best + 1e-6
