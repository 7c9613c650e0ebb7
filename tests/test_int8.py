"""Weight-only quantization (``ModelConfig.weight_quant``, :func:`specjax.models.quantize_weights`):
per-output-channel int8 round-trips within half a scale step (fp8 within its precision); the
quantized forward equals the float model holding the dequantized weights; and the quantized model
is the target: greedy speculative decoding of it equals its greedy autoregressive decoding token
for token (a float draft, its own self-draft, fused or not), and sampled decoding follows its law.
Bad values fail before any work; the CPU says int8 is slow there; saving is refused. The slow tier
adds the block and GBV verifiers, the self-draft and fused cases, fp8 decoding and the sampled
check."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax.decode import DecodeConfig, generate
from specjax.drafters import ModelDrafter
from specjax.models import (
    Decoder,
    checkpoint,
    fuse_projections,
    load_model,
    quant,
    quantize_weights,
)
from specjax.models.pure import PureModel, truncated
from specjax.models.weights import projection_weights
from specjax.sampling import SamplingParams
from specjax.testing import pair, tiny_config

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [12]]

pytestmark = pytest.mark.filterwarnings("ignore:weight_quant=.* on the CPU")


@pytest.fixture(scope="module")
def models():
    """``(int8 target, float draft, float target)``: the tiny sharpened pair, its target
    quantized."""
    target, draft = pair(sigma=0.05)
    return quantize_weights(target, "int8"), draft, target


@pytest.fixture(scope="module")
def autoregressive(models):
    target, _, _ = models
    out = generate(target, PROMPTS, DecodeConfig("autoregressive", GREEDY, max_new_tokens=30))
    return out.tokens


@pytest.mark.parametrize("shape, contracted", [((32, 4, 8), 1), ((4, 8, 32), 2), ((64, 48), 1)])
def test_int8_round_trip_within_half_a_step(shape, contracted):
    w = jax.random.normal(jax.random.key(0), shape) * jnp.linspace(0.01, 3.0, shape[-1])
    w = w.at[..., 0].set(0.0)  # an all-zero channel
    q, scale = quant.quantize(w, "int8", contracted)
    assert q.dtype == jnp.int8 and q.shape == w.shape and scale.shape == shape[contracted:]
    assert scale.dtype == jnp.float32 and float(jnp.abs(q).max()) == 127
    np.testing.assert_allclose(
        scale,
        jnp.abs(w).max(axis=tuple(range(contracted))) / 127 + (jnp.arange(shape[-1]) == 0),
        rtol=1e-6,
    )  # max|w| / 127 per output channel; 1 for the zero channel
    err = jnp.abs(quant.dequantize(q, scale) - w)
    assert bool(jnp.all(err <= scale / 2 * (1 + 1e-6)))
    assert bool(jnp.all(q[..., 0] == 0))


def test_fp8_round_trip_within_its_precision():
    """float8_e4m3fn keeps 3 mantissa bits: relative error <= 2^-4, or half its smallest
    subnormal step (2^-10 of the scale) near zero."""
    w = jax.random.normal(jax.random.key(1), (64, 48))
    q, scale = quant.quantize(w, "fp8")
    assert q.dtype == jnp.float8_e4m3fn and float(jnp.abs(q.astype(jnp.float32)).max()) == 448
    err = jnp.abs(quant.dequantize(q, scale) - w)
    assert bool(jnp.all(err <= jnp.maximum(jnp.abs(w) * 2.0**-4, scale * 2.0**-10) * (1 + 1e-6)))


def test_quantized_weights_and_shared_leaves(models):
    target, _, plain = models
    module, plain = target.module, plain.module
    params = nnx.to_pure_dict(nnx.state(module))
    for path, _ in projection_weights(module.config):
        node = params
        for key in path[:-1]:
            node = node[key]
        assert node[path[-1]].dtype == jnp.int8, path
        assert node[f"{path[-1]}_scale"].dtype == jnp.float32, path
    assert module.embed[...] is plain.embed[...]  # embedding and norms: as they were
    assert module.layers[0].attn_norm.scale[...] is plain.layers[0].attn_norm.scale[...]
    assert quantize_weights(module, "int8") is module  # already int8: as it is


def test_quantized_forward_is_the_dequantized_float_model(models):
    """The GEMM that converts int8 to the compute dtype and scales its output channels computes
    ``x @ (q * scale)``: the float model holding the dequantized weights, within fp32 rounding."""
    target, _, _ = models
    module = target.module
    params = nnx.to_pure_dict(nnx.state(module))
    for path, _ in projection_weights(module.config):
        node = params
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = quant.dequantize(node[path[-1]], node.pop(f"{path[-1]}_scale"))
    config = dataclasses.replace(module.config, weight_quant=None)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0))))
    nnx.replace_by_pure_dict(state, params)
    dequantized = nnx.merge(graphdef, state)
    tokens = jnp.asarray([PROMPTS[1]])
    np.testing.assert_allclose(target(tokens).logits, dequantized(tokens).logits, atol=1e-4)


@pytest.mark.parametrize(  # (a fused int8 tree: tests/test_fused_weights.py's mesh check)
    "verifier, paths",
    [
        ("greedy", 1),
        *(pytest.param(v, k, marks=pytest.mark.slow) for v, k in (("block", 1), ("gbv", 3))),
    ],
)
def test_int8_speculative_equals_int8_autoregressive(models, autoregressive, verifier, paths):
    """The int8 model is the target: with a float draft (drafts may come from any law), greedy
    speculative decoding gives its autoregressive tokens."""
    target, draft, _ = models
    drafter = ModelDrafter(draft, num_paths=paths, draft_len=3, sampling=GREEDY)
    out = generate(target, PROMPTS, DecodeConfig(verifier, GREEDY, max_new_tokens=30), drafter)
    assert out.tokens == autoregressive
    assert out.metrics.accepted_tokens > 0, "no draft token was accepted: the check is trivial"


def test_fusing_and_quantizing_commute(models):
    """Fused then quantized, or quantized then fused: the same weights, bit for bit (a
    per-channel scale does not mix channels)."""
    target, _, plain = models
    one = fuse_projections(target)
    other = quantize_weights(fuse_projections(plain), "int8")
    same = jax.tree.map(np.array_equal, nnx.to_pure_dict(one.state), nnx.to_pure_dict(other.state))
    assert all(jax.tree.leaves(same))


@pytest.mark.slow
def test_int8_self_draft_and_fused_int8_equal_autoregressive(models, autoregressive):
    """A quantized self-draft (its head and layers shared with the int8 target), and the fused
    int8 target with its own."""
    target, _, _ = models
    drafter = ModelDrafter(truncated(target.module, 1), num_paths=1, draft_len=3, sampling=GREEDY)
    out = generate(target, PROMPTS, DecodeConfig("greedy", GREEDY, 30), drafter)
    assert out.tokens == autoregressive and out.metrics.accepted_tokens > 0
    fused = fuse_projections(target)
    fused_ar = generate(fused, PROMPTS, DecodeConfig("autoregressive", GREEDY, 30)).tokens
    drafter = ModelDrafter(truncated(fused.module, 1), num_paths=1, draft_len=3, sampling=GREEDY)
    out = generate(fused, PROMPTS, DecodeConfig("greedy", GREEDY, 30), drafter)
    assert out.tokens == fused_ar and out.metrics.accepted_tokens > 0


@pytest.mark.slow  # (~30 s on 2 cores: one sampled program of 4,000 rows)
def test_int8_sampled_decoding_follows_the_int8_law():
    """A stochastic check at temperature 1: the next-token frequencies of 4,000 rows
    drafted by the float draft and verified (block) against the int8 target match the int8
    target's own law (chi-square)."""
    from scipy import stats

    target, draft = pair(vocab=8, sigma=0.3, scale=2.0)
    target = quantize_weights(target, "int8")
    prompt, rows = [1, 2, 3, 4], 4000
    law = jax.nn.softmax(target(jnp.asarray([prompt])).logits[0, -1])
    config = DecodeConfig("block", SamplingParams(temperature=1.0), max_new_tokens=2)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=2, sampling=config.sampling)
    out = generate(target, [prompt] * rows, config, drafter, seed=7)
    counts = np.bincount([t[0] for t in out.tokens], minlength=8)
    expected = np.asarray(law, np.float64) * rows
    keep = expected >= 5
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(expected[keep], expected[~keep].sum())
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-3
    assert out.metrics.accepted_tokens > 0


def test_bad_values_fail_before_any_work(models):
    _, _, plain = models
    with pytest.raises(ValueError, match=r"weight_quant 'int4' is not one of \('int8', 'fp8'\)"):
        quantize_weights(plain, "int4")
    with pytest.raises(ValueError, match="weight_quant 'int4' is not one of"):
        load_model("random:0", weight_quant="int4")
    with pytest.raises(ValueError, match=r"already quantized \(int8\); quantize its float"):
        quantize_weights(models[0], "fp8")
    with pytest.raises(ValueError, match="weight_quant 'int4'"):
        tiny_config(weight_quant="int4")


def test_cpu_warns_that_quantized_weights_are_slow(models):
    _, _, plain = models
    with pytest.warns(UserWarning, match=r"weight_quant=int8 on the CPU decodes slower"):
        quantize_weights(plain.module, "int8")


@pytest.mark.slow
def test_fp8_model_decodes_exactly_too(models):
    """fp8 is the same code path with float8_e4m3fn weights (meant for GPUs; XLA:CPU runs it)."""
    _, draft, plain = models
    target = quantize_weights(plain, "fp8")
    ar = generate(target, PROMPTS, DecodeConfig("autoregressive", GREEDY, 16)).tokens
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    assert generate(target, PROMPTS, DecodeConfig("greedy", GREEDY, 16), drafter).tokens == ar


def test_load_model_quantizes_and_save_refuses(tmp_path):
    model, _ = load_model("random:0", fuse_projections=True, weight_quant="int8")
    assert model.config.weight_quant == "int8" and model.config.fused_projections
    assert model.layers[0].attn.wqkv[...].dtype == jnp.int8
    with pytest.raises(ValueError, match=r"load time.*weight_quant='int8'"):
        checkpoint.save(tmp_path / "ckpt", model, model.config)
    assert not list(tmp_path.iterdir())
    assert isinstance(quantize_weights(PureModel.of(truncated(model, 1)), "int8"), PureModel)
