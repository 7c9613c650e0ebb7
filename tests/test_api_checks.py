"""The library API refuses a misuse with one clear exception before any work (an audit of the
public API): values of the wrong type for configs, sampling, drafters, seeds, batches and
loaders, caught where they are given instead of deep inside a compiled program."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decode import ContinuousBatch, DecodeConfig, Request, generate
from specjax.drafters import FeatureDrafter, ModelDrafter, NgramDrafter
from specjax.models import load_model, load_pair
from specjax.sampling import SamplingParams
from specjax.testing import pair
from specjax.verify import block_verify, specinfer_verify

S = SamplingParams(1.0)
G = SamplingParams(0.0)
TARGET, DRAFT = pair(48)
CFG = DecodeConfig("block", S, 4)
AR = DecodeConfig("autoregressive", G, 4)

MISUSES = [
    (lambda: DecodeConfig("block", 0.7), TypeError, "sampling must be a SamplingParams"),
    (lambda: DecodeConfig("block", S, 2.5), TypeError, "max_new_tokens must be an int"),
    (lambda: DecodeConfig("block", S, 4, [3]), TypeError, "stop_tokens must be a tuple"),
    (lambda: DecodeConfig("block", S, 4, (-1,)), ValueError, "token ids >= 0"),
    (lambda: DecodeConfig(3), TypeError, "verifier must be a name"),
    (lambda: SamplingParams(top_k=2.5), TypeError, "top_k must be an int"),
    (lambda: SamplingParams(temperature="1"), TypeError, "temperature must be a number"),
    (lambda: SamplingParams(float("inf")), ValueError, "and finite"),
    (lambda: ModelDrafter(DRAFT, draft_len=2.0, sampling=S), TypeError, "draft_len must be an int"),
    (lambda: ModelDrafter(DRAFT, sampling=None), TypeError, "sampling must be a SamplingParams"),
    (lambda: ModelDrafter(None, sampling=S), TypeError, "model must be a Llama or PureModel"),
    (lambda: NgramDrafter(TARGET), TypeError, "vocab_size must be an int, got a PureModel"),
    (lambda: NgramDrafter(0), ValueError, "vocab_size must be the target's V"),
    (lambda: FeatureDrafter(DRAFT, draft_len=3, sampling=S), TypeError, "must be an EagleHead"),
    (
        lambda: generate(TARGET, [[1, 2]], ModelDrafter(DRAFT, sampling=S), CFG),
        TypeError,
        "the order is (target, prompts, config, drafter)",
    ),
    (lambda: generate(TARGET, [[1, 2]], AR, seed=1.5), TypeError, "seed must be an int"),
    (lambda: ContinuousBatch(TARGET, None, AR, slots=2.5), TypeError, "must be ints"),
    (lambda: list(ContinuousBatch(TARGET, None, AR).run([[1, 2]])), TypeError, "Request(id"),
    (lambda: load_model("random:abc"), ValueError, "non-negative integer seed"),
    (lambda: load_model("random:1", dtype="float17"), ValueError, "not a floating dtype"),
    (lambda: load_pair("smollm2_self", draft_layers=0), ValueError, "draft_layers must be"),
]


@pytest.mark.parametrize("call,error,message", MISUSES)
def test_a_misuse_is_one_clear_exception(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value), str(info.value)


def test_the_right_types_still_pass():
    assert isinstance(Request(1, [1, 2]), Request)
    model, _ = load_model(Path("checkpoints/shakespeare/target"))  # a Path is a path
    assert model.config.vocab_size == 256
    assert generate(TARGET, [[1, 2]], AR, seed=np.int64(3)).tokens  # a NumPy int is an int


B, L, V = 2, 3, 5
TOK = jnp.zeros((B, L), jnp.int32)
Q, P = jnp.full((B, L, V), 1 / V), jnp.full((B, L + 1, V), 1 / V)
KEY = jax.random.key(0)
VERIFIER_MISUSES = [
    (lambda: block_verify(0, TOK, Q, P), "key must be jax.random.key(seed)"),
    (lambda: block_verify(jnp.zeros(3, jnp.uint32), TOK, Q, P), "key must be jax.random.key"),
    (lambda: block_verify(KEY, TOK.tolist(), Q, P), "draft_tokens must be an array"),
    (lambda: block_verify(KEY, TOK, Q.astype(jnp.int32), P), "must hold probabilities"),
    (lambda: block_verify(KEY, TOK, Q, P, num_draft=jnp.array([1.5, 2.0])), "integer counts"),
    (
        lambda: specinfer_verify(KEY, TOK[:, None], Q[:, None], P[:, None], replacement="no"),
        "replacement must be True or False",
    ),
]


@pytest.mark.parametrize("call,message", VERIFIER_MISUSES)
def test_a_verifier_misuse_is_one_type_error(call, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        call()


def test_every_key_form_still_verifies():
    raw = jax.random.PRNGKey(0)
    for key in (KEY, raw, jax.random.split(KEY, B), jax.random.split(raw, B)):
        assert block_verify(key, TOK, Q, P).num_accepted.shape == (B,)
