"""Monte-Carlo chi-square tests of the jitted JAX verifiers.

Sequence level: drafts are sampled from a small context-dependent draft model, verified by the
jitted verifier in one batched call, completed with target samples to length L+1, and the
empirical law of the strings is compared with the target's exact joint law. Outcome level: one
fixed draft verified many times is compared with the NumPy reference's exact outcome law.

Each test has a fixed seed and >= 100k samples. A test fails when the chi-square p-value is
below 1e-3, so a correct implementation fails fewer than 1 in 1000 seeds.
"""

from __future__ import annotations

import zlib
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from specjax import verify
from specjax.verify import reference
from tests import enumeration as en

P_MIN = 1e-3
NUM = 200_000


def chi_square_pvalue(counts: Counter, expected: dict, total: int) -> float:
    """Pearson chi-square p-value; cells with expected count < 5 are pooled into one."""
    impossible = [key for key in counts if expected.get(key, 0.0) <= 0.0]
    assert not impossible, f"outcomes with zero probability were observed: {impossible[:5]}"
    obs, exp, pooled_obs, pooled_exp = [], [], 0, 0.0
    for key, prob in expected.items():
        e = prob * total
        if e < 5:
            pooled_obs += counts.get(key, 0)
            pooled_exp += e
        else:
            obs.append(counts.get(key, 0))
            exp.append(e)
    if pooled_exp > 0:
        obs.append(pooled_obs)
        exp.append(pooled_exp)
    if len(obs) < 2:  # a deterministic law: no impossible outcome was seen, nothing to test
        return 1.0
    obs, exp = np.asarray(obs, float), np.asarray(exp, float)
    exp *= obs.sum() / exp.sum()  # remove float drift of the expected total
    return float(stats.chisquare(obs, exp).pvalue)


def jitted(name, kwargs):
    fn = verify.get(name)
    return jax.jit(lambda key, *args, **kw: fn(key, *args, **kwargs, **kw))


def run_batch(name, kwargs, batch: en.DraftBatch, seed: int, num_draft=None):
    args = (
        jnp.asarray(batch.draft_tokens, jnp.int32),
        jnp.asarray(batch.draft_probs, jnp.float32),
        jnp.asarray(batch.target_probs, jnp.float32),
    )
    extra = {} if num_draft is None else {"num_draft": jnp.asarray(batch.num_draft, jnp.int32)}
    result = jitted(name, kwargs)(jax.random.key(seed), *args, **extra)
    return tuple(np.asarray(x) for x in result)


SLOW = pytest.mark.slow
SEQUENCE_CASES = [  # the default tier keeps one case per verifier
    # (verifier, kwargs, scheme, K, L, V, model options, num_draft)
    ("token", {}, "chain", 1, 3, 3, {"q_zeros": 1}, 2),
    ("block", {}, "chain", 1, 3, 3, {}, None),
    ("greedy", {}, "chain", 1, 3, 3, {"one_hot_p": True}, None),
    ("specinfer", {"replacement": False}, "wor", 3, 2, 4, {}, None),
    ("spectr", {}, "iid", 3, 2, 3, {}, None),
    ("gbv", {}, "iid", 3, 2, 3, {}, None),
    pytest.param(("token", {}, "chain", 1, 3, 3, {}, None), marks=SLOW),
    pytest.param(("block", {}, "chain", 1, 3, 3, {"p_zeros": 1}, 2), marks=SLOW),
    pytest.param(("specinfer", {}, "iid", 3, 2, 3, {}, None), marks=SLOW),
    pytest.param(("specinfer", {}, "iid", 2, 3, 3, {"q_zeros": 1}, 2), marks=SLOW),
    pytest.param(("specinfer", {"replacement": False}, "wor_tree", 4, 2, 4, {}, None), marks=SLOW),
    pytest.param(("spectr", {}, "iid", 2, 3, 3, {"p_zeros": 1}, 2), marks=SLOW),
    pytest.param(("gbv", {}, "iid", 2, 3, 3, {}, 2), marks=SLOW),
]


@pytest.mark.parametrize(
    "case", SEQUENCE_CASES, ids=lambda c: f"{c[0]}{c[1] or ''}-{c[2]}-K{c[3]}-L{c[4]}-n{c[7]}"
)
def test_sequence_law_matches_target_joint(case):
    name, kwargs, scheme, k, l, v, model_opts, num_draft = case
    seed = zlib.crc32(str(case).encode())
    rng = np.random.default_rng(seed)
    model = en.random_model(rng, v, l, **model_opts)
    batch = en.sample_drafts(model, scheme, k, l, NUM, rng, num_draft=num_draft)
    tau, nxt, path = run_batch(name, kwargs, batch, seed, num_draft)
    n = l if num_draft is None else num_draft
    assert tau.max() <= n and tau.min() >= 0
    emitted = en.emitted_prefixes(batch.draft_tokens, tau, nxt, path if k > 1 else None)
    strings = en.complete_with_target(model, emitted, l + 1, rng)
    counts = Counter(map(tuple, strings.tolist()))
    p_value = chi_square_pvalue(counts, en.target_joint(model, l + 1), NUM)
    assert p_value > P_MIN, f"{name}: p = {p_value:.2e}"


def replicate(tokens, q, p, num):
    return en.DraftBatch(
        np.broadcast_to(tokens, (num, *tokens.shape)),
        np.broadcast_to(q, (num, *q.shape)),
        np.broadcast_to(p, (num, *p.shape)),
        np.zeros((num,), np.int64),
        np.zeros((num,), np.int64),
    )


OUTCOME_CASES = [
    ("token", {}, "chain", 1, 3, 4),
    ("block", {}, "chain", 1, 3, 4),
    ("specinfer", {}, "iid", 3, 2, 4),
    ("specinfer", {"replacement": False}, "wor", 3, 2, 4),
    ("spectr", {}, "iid", 3, 2, 4),
    ("gbv", {}, "iid", 3, 2, 4),
    ("gbv", {}, "iid", 4, 3, 5),
]


@pytest.mark.parametrize("case", OUTCOME_CASES, ids=lambda c: f"{c[0]}{c[1] or ''}-K{c[3]}")
def test_outcome_law_matches_reference(case):
    """(tau, next_token, path) of one fixed draft, 100k times, vs the reference's exact law."""
    name, kwargs, scheme, k, l, v = case
    rng = np.random.default_rng(zlib.crc32(str(case).encode()))
    model = en.random_model(rng, v, l, alpha=0.7)
    draft = en.sample_drafts(model, scheme, k, l, 1, rng)
    tokens, q, p = draft.draft_tokens[0], draft.draft_probs[0], draft.target_probs[0]
    law = reference.law(name, tokens, q, p, **kwargs)
    assert len(law) > 3  # a non-trivial outcome law
    num = 100_000
    tau, nxt, path = run_batch(name, kwargs, replicate(tokens, q, p, num), seed=17)
    counts = Counter(zip(tau.tolist(), nxt.tolist(), path.tolist(), strict=True))
    p_value = chi_square_pvalue(counts, law, num)
    assert p_value > P_MIN, f"{name}: p = {p_value:.2e}"


def test_greedy_outcome_matches_reference():
    """greedy_verify is deterministic: on 300 random chain drafts (draft tokens sampled from q,
    so they often miss the target's argmax) its (tau, next token) is the reference law's one
    outcome."""
    rng = np.random.default_rng(11)
    model = en.random_model(rng, 5, 3, alpha=0.7)
    batch = en.sample_drafts(model, "chain", 1, 3, 300, rng)
    tau, nxt, path = run_batch("greedy", {}, batch, seed=0)
    outcomes = set()
    for i in range(len(tau)):
        law = reference.law("greedy", *(x[i] for x in batch[:3]))
        assert list(law) == [(tau[i], nxt[i], path[i])] and list(law.values()) == [1.0], i
        outcomes.add(int(tau[i]))
    assert outcomes == {0, 1, 2, 3}, outcomes  # every accept length, so the test is not vacuous


def test_block_last_success_wins():
    """h_1 = 0 (position 1's own test always fails) yet tau = 2 has probability 1/2.

    p_1 = (1/3, 2/3), q_1 = (2/3, 1/3), x_1 = 0 gives w_1 = 1/2; p_2 = q_2 = (1/2, 1/2) gives
    Z_1 = 0, so h_1 = 0, and w_2 = h_2 = 1/2. A "first failure stops" implementation would
    never accept past position 1 (tau = 0 always).
    """
    tokens = np.array([0, 1])
    q = np.array([[2 / 3, 1 / 3], [1 / 2, 1 / 2]])
    p = np.array([[1 / 3, 2 / 3], [1 / 2, 1 / 2], [1 / 2, 1 / 2]])
    law = reference.block_law(tokens, q, p)
    assert sum(pr for (t, _, _), pr in law.items() if t == 1) == 0.0
    num = 100_000
    tau, _, _ = run_batch("block", {}, replicate(tokens, q, p, num), seed=3)
    share = (tau == 2).mean()
    assert (tau != 1).all()
    assert abs(share - 0.5) < 5 * np.sqrt(0.25 / num), share


@pytest.mark.parametrize("name,want", [("token", 10 / 9), ("block", 11 / 9)])
def test_paper_example_expected_accepted(name, want):
    """Golden values: E[tau] = 10/9 (token) and 11/9 (block) at L = 2, jitted, 200k samples."""
    rng = np.random.default_rng(0)
    model = en.bv_paper_model(2)
    batch = en.sample_drafts(model, "chain", 1, 2, NUM, rng)
    tau, _, _ = run_batch(name, {}, batch, seed=1)
    stderr = tau.std() / np.sqrt(NUM)
    assert abs(tau.mean() - want) < 4.5 * stderr, (tau.mean(), want)
