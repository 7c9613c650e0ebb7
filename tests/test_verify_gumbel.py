"""The drafter-invariant ``gumbel`` verifier (specjax.verify.gumbel): a NumPy reference of its
rule, the outcome law of an independent draft (Monte-Carlo against the exact reference law, whose
losslessness tests/test_reference_exact.py enumerates), coupled drafts (every emitted token is the
target's own Gumbel-max draw; the sequence law; the acceptance rate against its exact value and
the paper's bound), greedy equivalence at temperature 0 and the input checks."""

from __future__ import annotations

import zlib
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verify
from specjax.verify import reference
from tests import enumeration as en
from tests.test_verify_montecarlo import P_MIN, chi_square_pvalue, replicate

gumbel = jax.jit(verify.gumbel_verify)


def numpy_gumbel(noise, tokens, draft_probs, target_probs, num_draft):
    """The rule, row by row: the target's token at i is argmax log p_i + G_i; accept while the
    draft's equals it (within num_draft, a finite, non-negative draft law, no padding)."""
    out = []
    for g, x, q, p, n in zip(noise, tokens, draft_probs, target_probs, num_draft, strict=True):
        with np.errstate(divide="ignore"):
            y = np.argmax(np.log(p) + g, axis=-1)
        tau = 0
        while (
            tau < n
            and x[tau] >= 0
            and np.all(np.isfinite(q[tau]))
            and np.all(q[tau] >= 0)
            and x[tau] == y[tau]
        ):
            tau += 1
        out.append((tau, int(y[tau])))
    return out


def run(noise, batch: en.DraftBatch, num_draft=None):
    """The jitted verifier given race weights ``noise`` (``exp`` of Gumbel noise)."""
    extra = {} if num_draft is None else {"num_draft": jnp.asarray(num_draft, jnp.int32)}
    result = gumbel(
        jnp.asarray(noise, jnp.float32),
        jnp.asarray(batch.draft_tokens, jnp.int32),
        jnp.asarray(batch.draft_probs, jnp.float32),
        jnp.asarray(batch.target_probs, jnp.float32),
        **extra,
    )
    return tuple(np.asarray(x) for x in result)


def test_matches_the_numpy_rule():
    """1,000 rows with zeros in the laws, padding, shorter num_draft and a NaN draft law: (tau, next
    token) equal the NumPy rule's, and every accept length occurs."""
    rng = np.random.default_rng(5)
    num, l_len, v = 1000, 3, 3
    model = en.random_model(rng, v, l_len, alpha=0.3, q_zeros=1, p_equals_q=True)
    batch = en.sample_drafts(model, "chain", 1, l_len, num, rng)
    tokens, q = batch.draft_tokens.copy(), batch.draft_probs.copy()
    tokens[:20, 2] = -1  # padding
    q[20:40, 1, 0] = np.nan  # a broken law ends the path there
    num_draft = rng.integers(0, l_len + 1, size=num)
    noise = rng.gumbel(size=(num, l_len + 1, v))
    batch = batch._replace(draft_tokens=tokens, draft_probs=q)
    tau, nxt, path = run(np.exp(noise), batch, num_draft)
    want = numpy_gumbel(noise, tokens, q, batch.target_probs, num_draft)
    assert list(zip(tau.tolist(), nxt.tolist(), strict=True)) == want
    assert set(tau.tolist()) == {0, 1, 2, 3} and not path.any()


def test_outcome_law_of_an_independent_draft_matches_the_reference():
    """One fixed draft, 100k noise draws from gumbel_noise (rows' keys, their positions): the
    outcomes follow reference.gumbel_law (chi-square)."""
    case = ("gumbel", 3, 4)
    rng = np.random.default_rng(zlib.crc32(str(case).encode()))
    _, l_len, v = case
    model = en.random_model(rng, v, l_len, alpha=0.7)
    draft = en.sample_drafts(model, "chain", 1, l_len, 1, rng)
    tokens, q, p = draft.draft_tokens[0], draft.draft_probs[0], draft.target_probs[0]
    law = reference.gumbel_law(tokens, q, p)
    assert len(law) > 3
    num = 100_000
    keys = jax.random.split(jax.random.key(17), num)
    positions = jnp.broadcast_to(jnp.arange(l_len + 1) + 40, (num, l_len + 1))
    noise = verify.gumbel_noise(keys, positions, v)  # [N, L+1, V]
    tau, nxt, path = run(noise, replicate(tokens, q, p, num))
    counts = Counter(zip(tau.tolist(), nxt.tolist(), path.tolist(), strict=True))
    assert chi_square_pvalue(counts, law, num) > P_MIN


def coupled_drafts(model: en.Model, noise: np.ndarray, l_len: int) -> en.DraftBatch:
    """Drafts whose token at i is argmax log q_i + G_i (the noise the target's token at i is
    drawn with), with their laws and the target's along them."""
    num = noise.shape[0]
    tokens = np.zeros((num, l_len), np.int64)
    q = np.zeros((num, l_len, model.vocab))
    p = np.zeros((num, l_len + 1, model.vocab))
    for i in range(l_len + 1):
        rows = model.indices(tokens[:, :i])
        p[:, i] = model.p_table[i][rows]
        if i < l_len:
            q[:, i] = model.q_table[i][rows]
            with np.errstate(divide="ignore"):
                tokens[:, i] = np.argmax(np.log(q[:, i]) + noise[:, i], axis=-1)
    zeros = np.zeros((num,), np.int64)
    return en.DraftBatch(tokens, q, p, zeros, zeros)


def autoregressive(model: en.Model, noise: np.ndarray) -> np.ndarray:
    """``[N, T]``: the target's own Gumbel-max draws, token after token."""
    num, t_len, _ = noise.shape
    out = np.zeros((num, t_len), np.int64)
    for i in range(t_len):
        p = model.p_table[i][model.indices(out[:, :i])]
        with np.errstate(divide="ignore"):
            out[:, i] = np.argmax(np.log(p) + noise[:, i], axis=-1)
    return out


def exact_agreement(p: np.ndarray, q: np.ndarray) -> float:
    """P(argmax log p + G == argmax log q + G) = sum_a 1 / sum_v max(p_v / p_a, q_v / q_a)
    (exponential races: E_a / p_a and E_a / q_a both smallest)."""
    both = (p > 0) & (q > 0)
    return float(sum(1.0 / np.maximum(p / p[a], q / q[a]).sum() for a in np.flatnonzero(both)))


def test_coupled_drafts_emit_the_targets_own_draws():
    """Drafts drawn with the target's noise: every emitted token is the target's autoregressive
    Gumbel-max draw (so the output is the target's sample whatever the draft), the strings of
    those draws follow the target's joint law (chi-square), and the first token is accepted with
    its exact probability, which beats the paper's bound (1 - TV) / (1 + TV)."""
    case = ("gumbel-coupled", 3, 3)
    rng = np.random.default_rng(zlib.crc32(str(case).encode()))
    _, l_len, v = case
    model = en.random_model(rng, v, l_len, alpha=0.8)
    num = 100_000
    keys = jax.random.split(jax.random.key(3), num)
    weights = np.asarray(
        verify.gumbel_noise(keys, jnp.broadcast_to(jnp.arange(l_len + 1), (num, l_len + 1)), v),
        np.float64,
    )
    noise = np.log(weights)  # the Gumbel noise itself
    batch = coupled_drafts(model, noise, l_len)
    tau, nxt, _ = run(weights, batch)
    ar = autoregressive(model, noise)
    for i in range(num):
        emitted = [*batch.draft_tokens[i, : tau[i]], nxt[i]]
        assert emitted == ar[i, : tau[i] + 1].tolist(), i
    assert set(tau.tolist()) == {0, 1, 2, 3}
    counts = Counter(map(tuple, ar.tolist()))
    assert chi_square_pvalue(counts, en.target_joint(model, l_len + 1), num) > P_MIN

    p0, q0 = model.p_table[0][0], model.q_table[0][0]
    want = exact_agreement(p0, q0)
    share = float((tau > 0).mean())
    assert abs(share - want) < 4.5 * np.sqrt(want * (1 - want) / num), (share, want)
    tv = 0.5 * np.abs(p0 - q0).sum()
    assert want >= (1 - tv) / (1 + tv) - 1e-12


def test_coupled_acceptance_formula():
    """verify.coupled_acceptance (one sort) equals the pairwise formula on rows with zeros in
    either law and ties in p / q, and lies between (1 - TV) / (1 + TV) and 1 - TV."""
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.full(7, 0.6), size=200)
    q = rng.dirichlet(np.full(7, 0.6), size=200)
    p[:50, 0] = 0.0
    q[25:75, 1] = 0.0
    q[100:120] = p[100:120]  # ties everywhere
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    got = np.asarray(verify.coupled_acceptance(jnp.asarray(p), jnp.asarray(q)))
    want = np.array([exact_agreement(a, b) for a, b in zip(p, q, strict=True)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    tv = 0.5 * np.abs(p - q).sum(-1)
    assert np.all(got >= (1 - tv) / (1 + tv) - 1e-6) and np.all(got <= 1 - tv + 1e-6)
    np.testing.assert_allclose(got[100:120], 1.0, rtol=1e-5)


def test_greedy_at_temperature_0():
    """One-hot target laws: whatever the noise, the outcome is greedy verification's."""
    rng = np.random.default_rng(9)
    model = en.random_model(rng, 3, 3, alpha=0.7, one_hot_p=True)
    batch = en.sample_drafts(model, "chain", 1, 3, 1000, rng)
    tau, nxt, _ = run(np.exp(rng.gumbel(size=(1000, 4, 3)) * 4.0), batch)
    args = [jnp.asarray(x) for x in batch[:3]]
    greedy = verify.greedy_verify(jax.random.key(0), *args)
    np.testing.assert_array_equal(tau, np.asarray(greedy.num_accepted))
    np.testing.assert_array_equal(nxt, np.asarray(greedy.next_token))
    assert set(tau.tolist()) == {0, 1, 2, 3}


def test_noise_is_a_function_of_key_and_position():
    """The same row key and position give the same noise, in any batch and any order."""
    keys = jax.random.split(jax.random.key(1), 3)
    a = verify.gumbel_noise(keys, jnp.array([[5, 6], [0, 1], [7, 9]]), 11)
    b = verify.gumbel_noise(keys[::-1], jnp.array([[9, 7], [1, 0], [6, 5]]), 11)
    np.testing.assert_array_equal(a[0, 0], b[2, 1])
    np.testing.assert_array_equal(a[2, 1], b[0, 0])
    np.testing.assert_array_equal(a[1], b[1, ::-1])
    assert not np.array_equal(a[0, 0], a[0, 1])


def test_wrong_noise_shape_is_one_clear_error():
    tokens = jnp.zeros((2, 3), jnp.int32)
    q = jnp.full((2, 3, 4), 0.25)
    p = jnp.full((2, 4, 4), 0.25)
    with pytest.raises(ValueError, match=r"noise must be \[B, L\+1, V\]"):
        verify.gumbel_verify(jnp.zeros((2, 3, 4)), tokens, q, p)
