"""Drafter-invariant sampling through the loop: with the ``gumbel`` verifier at temperature 1 the
output is the autoregressive sample of the seed (``drafter=none``), token for token, whatever
the drafter (model, self-draft, n-gram, feature head), the draft length, the adaptive widths,
the batch or the slot a request lands in."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from specjax import sampling
from specjax.decode import DecodeConfig, generate
from specjax.decode.batching import ContinuousBatch, Request
from specjax.decode.ssd import SSDConfig, SSDDrafter
from specjax.drafters import FeatureDrafter, ModelDrafter, NgramDrafter
from specjax.models import Decoder
from specjax.models.pure import PureModel, truncated
from specjax.testing import perturbed, sharpened, tiny_config
from tests.test_feature_drafter import random_head

HOT = sampling.SamplingParams(temperature=1.0)
NEW, STOP, SEED = 24, 8, 11


@pytest.fixture(scope="module")
def target():
    return sharpened(Decoder(tiny_config(12, num_layers=2, name="t"), rngs=nnx.Rngs(3)), 3.0)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 12, size=int(n)).tolist() for n in (1, 30, 4, 9, 17)]


@pytest.fixture(scope="module")
def autoregressive(target, prompts):
    config = DecodeConfig("autoregressive", HOT, NEW, (STOP,))
    return generate(PureModel.of(target), prompts, config, seed=SEED).tokens


def drafter_for(kind: str, target, draft_len: int = 3, params=HOT):
    if kind == "model":
        draft = PureModel.of(perturbed(target, 0.3, 1))
        return ModelDrafter(draft, draft_len=draft_len, sampling=params)
    if kind == "self":
        return ModelDrafter(
            PureModel.of(truncated(target, 1)), draft_len=draft_len, sampling=params
        )
    if kind == "ngram":
        return NgramDrafter(12, draft_len=draft_len)
    head = random_head(PureModel.of(target), 8)
    return FeatureDrafter(head, draft_len=draft_len, sampling=params)


@pytest.mark.parametrize(
    "kind,draft_len",
    [("model", 3), pytest.param("feature", 2, marks=pytest.mark.slow),
     pytest.param("self", 4, marks=pytest.mark.slow),
     pytest.param("ngram", 3, marks=pytest.mark.slow)],
)  # fmt: skip
def test_gumbel_equals_autoregressive_token_for_token(
    target, prompts, autoregressive, kind, draft_len
):
    config = DecodeConfig("gumbel", HOT, NEW, (STOP,))
    out = generate(
        PureModel.of(target), prompts, config, drafter_for(kind, target, draft_len), seed=SEED
    )
    assert out.tokens == autoregressive
    assert any(len(r) < NEW for r in out.tokens)  # a stop token ended a row
    hist = out.metrics.accepted_length_histogram
    assert hist[0] > 0 and sum(hist[1:]) > 0  # drafts were both rejected and accepted


def test_processed_sampling(target, prompts):
    """Top-k / top-p at temperature 0.8: the draft's and the target's processed laws take the
    same noise; the output is still the autoregressive sample."""
    params = sampling.SamplingParams(temperature=0.8, top_k=6, top_p=0.9)
    pure = PureModel.of(target)
    ar = generate(pure, prompts, DecodeConfig("autoregressive", params, NEW, (STOP,)), seed=SEED)
    config = DecodeConfig("gumbel", params, NEW, (STOP,))
    out = generate(pure, prompts, config, drafter_for("model", target, 3, params), seed=SEED)
    assert out.tokens == ar.tokens
    assert sum(out.metrics.accepted_length_histogram[1:]) > 0


def test_continuous_batch_with_adaptive_widths(target, prompts):
    """A batch job with widths chosen per step (drawn at random by its controller's probes) and
    three slots for five requests: each request's text is its autoregressive sample."""
    reqs = [Request(i, p) for i, p in enumerate(prompts)]
    plain = ContinuousBatch(
        PureModel.of(target), None, DecodeConfig("autoregressive", HOT, NEW, (STOP,)), slots=2
    )
    want = {c.id: c.token_ids for c in plain.run(reqs)}
    config = DecodeConfig("gumbel", HOT, NEW, (STOP,), widths=(0, 3))
    engine = ContinuousBatch(PureModel.of(target), drafter_for("model", target), config, slots=3)
    got = {c.id: c.token_ids for c in engine.run(reqs)}
    assert got == want
    assert sum(engine.metrics.accepted_length_histogram[1:]) > 0


def test_drafters_that_cannot_couple_are_refused(target, prompts):
    """The SSD drafter draws its trees with its own keys: one error naming the fix."""
    small = PureModel.of(truncated(target, 1))
    ssd = SSDDrafter(small, ssd=SSDConfig(fan_out=(2, 1, 1)), sampling=HOT)
    with pytest.raises(ValueError, match="verifier 'gumbel' couples"):
        generate(PureModel.of(target), prompts, DecodeConfig("gumbel", HOT, NEW), ssd)
