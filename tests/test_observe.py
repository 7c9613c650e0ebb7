"""Observing a step (``specjax.decode.seams.observed_step``): the new state is
``speculative_step``'s bit for bit (a chain, K paths under a chain verifier, a tree verifier, a
feature drafter); the laws it returns are the drafter's and the target's teacher-forced ones
along every drafted path; the target runs once per step; ``reproducelib.observe`` with one path
decodes the tokens ``generate`` does."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx
from reproducelib import observe

from specjax.decode import DecodeConfig, generate
from specjax.decode.seams import (
    observed_step,
    prefill_program,
    prepare,
    speculative_step,
    split_keys,
)
from specjax.drafters import FeatureDrafter, ModelDrafter
from specjax.models import Decoder
from specjax.models.pure import PureModel
from specjax.sampling import SamplingParams, probs_from_logits
from specjax.testing import pair, sharpened, tiny_config
from tests.test_feature_drafter import random_head

SAMPLED = SamplingParams(1.0)
PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [4]]
STEPS = 3

_prefill = jax.jit(prefill_program, static_argnames=("capacity", "buffer"))
_observed = jax.jit(observed_step, static_argnames=("config",))
_speculative = jax.jit(speculative_step, static_argnames=("config",))


@pytest.fixture(scope="module")
def models():
    return pair(vocab=24, sigma=0.05)


def model_drafter(models, k, l):
    return ModelDrafter(models[1], num_paths=k, draft_len=l, sampling=SAMPLED)


def start(target, drafter, config, seed=0):
    """The state after prefill (sized for the drafter's K paths)."""
    multipath = drafter.num_paths == 1 or config.multipath
    checks = config if multipath else dataclasses.replace(config, verifier="gbv")
    b = prepare(target, drafter, PROMPTS, checks)
    return _prefill(target, drafter, b.prompts, b.lengths, b.active, np.int32(seed),
                    capacity=b.capacity, buffer=b.buffer)  # fmt: skip


def same(a, b) -> bool:
    """Every leaf of two pytrees equal bit for bit (typed keys by their data)."""
    typed = lambda x: jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
    leaves = lambda t: [
        np.asarray(jax.random.key_data(x) if typed(x) else x) for x in jax.tree.leaves(t)
    ]
    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.array_equal(x, y) for x, y in zip(leaves(a), leaves(b), strict=True)
    )


@pytest.mark.parametrize(
    "verifier,k",
    [  # the default tier keeps a chain; K = 3 is also in the one-forward and the laws tests
        ("block", 1),
        pytest.param("block", 3, marks=pytest.mark.slow),
        pytest.param("specinfer", 3, marks=pytest.mark.slow),
    ],
)
def test_the_observed_step_is_the_speculative_step(models, verifier, k):
    """Same new state (tokens, lengths, caches, keys, stats, draft state) for STEPS steps: a
    chain, path 0 of K i.i.d. paths under a chain verifier, and a tree verifier."""
    target, drafter = models[0], model_drafter(models, k, 3)
    config = DecodeConfig(verifier, SAMPLED, 12)
    state = start(target, drafter, config)
    for _ in range(STEPS):
        observed, laws = _observed(target, drafter, state, config)
        state = _speculative(target, drafter, state, config)
        assert same(observed, state)
        assert np.array_equal(np.where(laws.active, laws.tau, -1), state.stats.last_accepted)
    assert verifier == "specinfer" or not np.any(laws.path)


@pytest.mark.slow  # compiles a second tiny target's steps (~10 s)
def test_the_observed_step_feeds_a_feature_drafter_as_the_step_does():
    target = PureModel.of(sharpened(Decoder(tiny_config(12, name="t"), rngs=nnx.Rngs(3)), 3.0))
    drafter = FeatureDrafter(random_head(target, 8), num_paths=2, draft_len=3, sampling=SAMPLED)
    config = DecodeConfig("block", SAMPLED, 12)
    state = start(target, drafter, config)
    for _ in range(STEPS):
        observed, _ = _observed(target, drafter, state, config)
        state = _speculative(target, drafter, state, config)
        assert same(observed, state)


@pytest.mark.slow  # the default tier keeps the observed step == the step, and its one forward
def test_the_laws_are_the_drafters_and_the_targets_teacher_forced(models):
    """Draft tokens and laws: what the drafter proposes with the step's key; target laws: one
    stand-alone forward over each row's sequence followed by each drafted path, within 1e-5."""
    target, drafter = models[0], model_drafter(models, 3, 3)
    config = DecodeConfig("block", SAMPLED, 12)
    state = start(target, drafter, config)
    forward = jax.jit(lambda x: probs_from_logits(target(x).logits, config.sampling))
    propose = jax.jit(drafter.propose)
    for _ in range(2):
        before = state
        state, laws = _observed(target, drafter, before, config)
        _, k_draft, _ = split_keys(before.keys, 3)
        draft, _ = propose(before.draft_state, k_draft, before.tokens, before.lengths)
        np.testing.assert_array_equal(laws.tokens, draft.tokens)
        np.testing.assert_allclose(laws.draft_probs, draft.probs, atol=1e-6)
        b, k, l_len = laws.tokens.shape  # B: PROMPTS padded to a bucket of rows
        assert laws.target_probs.shape == (b, k, l_len + 1, 24)  # [B, K, L + 1, V]
        np.testing.assert_array_equal(laws.active, ~np.asarray(before.done))
        # Row (b, k): b's committed tokens then path k, right-padded (causal: pads are unseen).
        lengths = np.asarray(before.lengths)
        seqs = np.zeros((b, k, before.tokens.shape[1] + l_len), np.int32)
        for row, n in enumerate(lengths):
            seqs[row, :, :n] = np.asarray(before.tokens)[row, :n]
            seqs[row, :, n : n + l_len] = laws.tokens[row]
        p = forward(seqs.reshape(b * k, -1)).reshape(b, k, seqs.shape[-1], -1)  # [B, K, T, V]
        for row in np.flatnonzero(laws.active):
            n = lengths[row]  # the root sits at n - 1
            want = p[row, :, n - 1 : n + l_len]  # [K, L + 1, V]
            np.testing.assert_allclose(laws.target_probs[row], want, atol=1e-5)


class Counting:
    """A target that counts its calls (at trace time)."""

    def __init__(self, model):
        self.model, self.calls = model, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.model(*args, **kwargs)


@pytest.mark.parametrize("k", [1, 3])
def test_the_observed_step_runs_the_target_once(models, k):
    drafter = model_drafter(models, k, 3)
    config = DecodeConfig("block", SAMPLED, 12)
    state = start(models[0], drafter, config)
    target = Counting(models[0])
    jax.make_jaxpr(lambda s: observed_step(target, drafter, s, config))(state)
    assert target.calls == 1


@pytest.mark.slow  # the default tier shows the observed step is the speculative step
def test_observe_with_one_path_decodes_as_generate(models):
    target, drafter = models[0], model_drafter(models, 1, 3)
    config = DecodeConfig("block", SAMPLED, 12)
    seen = observe.observe(target, drafter, PROMPTS, config, seed=3)
    assert seen.tokens == generate(target, PROMPTS, config, drafter, seed=3).tokens
    assert seen.tau.size > 0 and np.all((seen.e_token >= 0) & (seen.e_token <= 3))
