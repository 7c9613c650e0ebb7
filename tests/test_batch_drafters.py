"""Continuous batching with every drafter and verifier: greedy outputs equal autoregressive
decoding token for token, with rows finishing at different steps (a stop token, lengths) and
refilled mid-run (with adaptive widths: drawn at random per step). The default tier keeps one
case (three model paths drawn without replacement, SpecInfer); the rest are slow."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from specjax import sampling
from specjax.decode import DecodeConfig, generate
from specjax.decode.batching import ContinuousBatch, Request
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.drafters.feature import FeatureDrafter
from specjax.models import Decoder
from specjax.models.pure import PureModel, truncated
from specjax.testing import perturbed, sharpened, tiny_config
from tests.test_feature_drafter import random_head

GREEDY = sampling.SamplingParams(temperature=0.0)
NEW, STOP = 20, 5


@pytest.fixture(scope="module")
def target():
    module = sharpened(Decoder(tiny_config(12, num_layers=2, name="t"), rngs=nnx.Rngs(3)), 3.0)
    return module


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 12, size=int(n)).tolist() for n in (1, 30, 4, 9, 17, 2, 25)]


@pytest.fixture(scope="module")
def autoregressive(target, prompts):
    config = DecodeConfig("autoregressive", GREEDY, NEW, (STOP,))
    return generate(PureModel.of(target), prompts, config).tokens


def drafter_for(kind: str, target, k: int, replacement: bool = True):
    pure = PureModel.of(target)
    if kind == "model":
        draft = PureModel.of(perturbed(target, 0.3, 1))
        return ModelDrafter(
            draft, num_paths=k, draft_len=3, sampling=GREEDY, replacement=replacement
        )
    if kind == "self":
        return ModelDrafter(
            PureModel.of(truncated(target, 1)), num_paths=k, draft_len=3, sampling=GREEDY
        )
    if kind == "ngram":
        return NgramDrafter(12, num_paths=k, draft_len=3)
    return FeatureDrafter(random_head(pure, 8), num_paths=k, draft_len=3, sampling=GREEDY)


CASES = [
    pytest.param("feature", "block", 1, True, (), id="feature-block", marks=pytest.mark.slow),
    pytest.param("feature", "gbv", 3, True, (), id="feature-gbv-K3", marks=pytest.mark.slow),
    pytest.param("model", "token", 1, True, (0, 3), id="model-token-widths",
                 marks=pytest.mark.slow),
    pytest.param("model", "spectr", 2, True, (), id="model-spectr-K2", marks=pytest.mark.slow),
    pytest.param("model", "specinfer", 3, False, (), id="model-specinfer-without-replacement"),
    pytest.param("self", "greedy", 1, True, (0, 3), id="self-greedy-widths",
                 marks=pytest.mark.slow),
    pytest.param("ngram", "block", 1, True, (0, 3), id="ngram-block-widths",
                 marks=pytest.mark.slow),
    pytest.param("ngram", "specinfer", 3, True, (), id="ngram-specinfer-K3",
                 marks=pytest.mark.slow),
]  # fmt: skip


@pytest.mark.parametrize("kind,verifier,k,replacement,widths", CASES)
def test_greedy_batch_equals_autoregressive(
    target, prompts, autoregressive, kind, verifier, k, replacement, widths
):
    drafter = drafter_for(kind, target, k, replacement)
    config = DecodeConfig(verifier, GREEDY, NEW, (STOP,), widths=widths, width_policy="random")
    engine = ContinuousBatch(PureModel.of(target), drafter, config, slots=3)
    done = {c.id: c for c in engine.run([Request(i, p) for i, p in enumerate(prompts)])}
    assert [done[i].token_ids for i in range(len(prompts))] == autoregressive
    assert {done[i].finish_reason for i in range(len(prompts))} == {"stop", "length"}
    hist = engine.metrics.accepted_length_histogram
    assert hist[0] > 0 and sum(hist[1:]) > 0  # rejections and acceptances
