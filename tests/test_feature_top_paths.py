"""The feature drafter's top paths (``FeatureDrafter(top_paths=True)``, EAGLE-2's branching at the
root): path k starts with the head's k-th most likely token and follows its argmax, each law the
point mass at its token; greedy speculative output == autoregressive output (widths forced at
random, a batch of mixed lengths); one such chain keeps the sequence law at temperature 1 (slow);
a broken head's laws end the paths; the verifiers that assume i.i.d. paths and temperatures above
0 are refused for K > 1 before any work."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax import sampling
from specjax.decode import DecodeConfig, generate
from specjax.decode.seams import prefill_program, prepare
from specjax.drafters.feature import FeatureDrafter
from specjax.models import Decoder
from specjax.models.pure import PureModel
from specjax.testing import sharpened, tiny_config
from tests.test_decode_lossless import NEW, PROMPT, ROWS, chi_square_pvalue, exact_joint
from tests.test_feature_drafter import GREEDY, PROMPTS, V, random_head

SAMPLED = sampling.SamplingParams(temperature=1.0)


@pytest.fixture(scope="module")
def target():
    return PureModel.of(sharpened(Decoder(tiny_config(12, name="t"), rngs=nnx.Rngs(3)), 3.0))


@pytest.fixture(scope="module")
def autoregressive(target):
    return generate(target, PROMPTS, DecodeConfig("autoregressive", GREEDY, 24)).tokens


@pytest.fixture(scope="module")
def small_target():
    return PureModel.of(sharpened(Decoder(tiny_config(V, name="t"), rngs=nnx.Rngs(10)), 1.0))


def test_greedy_top_paths_equal_autoregressive(target, autoregressive):
    """Widths forced at random per step: full trees, narrower ones and one-token steps."""
    drafter = FeatureDrafter(
        random_head(target, 8), num_paths=3, draft_len=3, sampling=GREEDY, top_paths=True
    )
    cfg = DecodeConfig("specinfer", GREEDY, 24, widths=(0, 1, 3), width_policy="random")
    out = generate(target, PROMPTS, cfg, drafter, seed=1)
    assert out.tokens == autoregressive
    hist = out.metrics.accepted_length_histogram
    assert hist[0] > 0 and sum(hist[1:]) > 0  # rejections and acceptances in one run


def test_paths_start_at_the_heads_likeliest_tokens(target):
    """Root children in the order of the head's law (read off a sampling drafter at T = 1, whose
    root law is the softmax of the same logits), path 0 the greedy chain, point-mass laws; all
    three drafters propose from one prefill's state."""
    head = random_head(target, 8, seed=3)
    top = FeatureDrafter(head, num_paths=3, draft_len=3, sampling=GREEDY, top_paths=True)
    cfg = DecodeConfig("specinfer", GREEDY, 8)
    b = prepare(target, top, PROMPTS, cfg)
    init = jax.jit(prefill_program, static_argnames=("capacity", "buffer"))
    state = init(target, top, b.prompts, b.lengths, b.active, np.int32(0),
                 capacity=b.capacity, buffer=b.buffer)  # fmt: skip
    keys = jax.random.split(jax.random.key(0), state.lengths.shape[0])

    def propose(drafter):  # compiled: eager, each op compiles on its own (13 s -> 7 s)
        propose = jax.jit(lambda d, *args: d.propose(*args)[0])
        return propose(drafter, state.draft_state, keys, state.tokens, state.lengths)

    drafts = [
        propose(top),
        propose(FeatureDrafter(head, num_paths=3, draft_len=3, sampling=SAMPLED)),
        propose(FeatureDrafter(head, num_paths=1, draft_len=3, sampling=GREEDY)),
    ]
    (tokens, probs), (_, law), (chain, _) = [
        (np.asarray(d.tokens), np.asarray(d.probs)) for d in drafts
    ]  # [B, K, L], [B, K, L, V]
    root = law[:, 0, 0]  # [B, V]: the head's root law at T = 1
    np.testing.assert_array_equal(tokens[:, :, 0], np.argsort(-root, axis=-1, kind="stable")[:, :3])
    np.testing.assert_array_equal(tokens[:, 0], chain[:, 0])
    np.testing.assert_array_equal(probs, np.eye(target.config.vocab_size)[tokens])
    assert np.all(np.asarray(drafts[0].num_draft) == 3)


def test_a_broken_heads_laws_end_the_paths(target):
    """Point masses where the head's logits are finite, NaN rows where they are not: every
    verifier cuts a path at a law that is not a probability vector (sanitize_draft)."""
    drafter = FeatureDrafter(random_head(target, 8), num_paths=2, sampling=GREEDY, top_paths=True)
    logits = jnp.array([[0.0, 1.0, 2.0, 0.5, 0.0, 0.0, 0.0, 0.0]] * 2).at[1, 3].set(jnp.nan)
    laws = np.asarray(drafter._point_masses(jnp.array([4, 7]), logits))  # [2, V]
    np.testing.assert_array_equal(laws[0], np.eye(target.config.vocab_size)[4])
    assert np.all(np.isnan(laws[1]))


@pytest.mark.parametrize(
    "verifier,params,match",
    [
        ("specinfer", SAMPLED, "exact at temperature 0 only"),
        ("gbv", GREEDY, "use verifier=specinfer"),
    ],
)
def test_fixed_paths_meet_only_greedy_specinfer(target, verifier, params, match):
    drafter = FeatureDrafter(
        random_head(target, 8), num_paths=2, draft_len=2, sampling=params, top_paths=True
    )
    with pytest.raises(ValueError, match=match):
        prepare(target, drafter, PROMPTS, DecodeConfig(verifier, params, 8))
    one = FeatureDrafter(
        random_head(target, 8), num_paths=1, draft_len=2, sampling=params, top_paths=True
    )
    with pytest.raises(ValueError, match="exceeds the head's draft vocabulary of 8 ids"):
        FeatureDrafter(random_head(target, 8), num_paths=9, sampling=GREEDY, top_paths=True)
    assert not one.greedy_only  # one fixed chain: a point-mass draft, exact at any temperature
    prepare(target, one, PROMPTS, DecodeConfig("block", params, 8))


@pytest.mark.slow  # Monte-Carlo over whole sequences
def test_one_top_chain_keeps_the_sequence_law_at_temperature_one(small_target):
    """K = 1: a chain of the head's argmax tokens with point-mass laws is an honest draft at any
    temperature (block verification of a deterministic proposal)."""
    head = random_head(small_target, 3, seed=5)
    drafter = FeatureDrafter(head, num_paths=1, draft_len=2, sampling=SAMPLED, top_paths=True)
    out = generate(
        small_target, [PROMPT] * ROWS, DecodeConfig("block", SAMPLED, NEW), drafter, seed=7
    )
    assert out.metrics.accepted_tokens > 0.1 * ROWS
    assert chi_square_pvalue(out.tokens, exact_joint(small_target, SAMPLED)) > 1e-3
