"""Fused projections (``ModelConfig.fused_projections``, :func:`specjax.models.fuse_projections`):
one ``wqkv`` and one ``w_gate_up`` GEMM per block give the unfused model's logits within 1e-5 in
fp32, in a full forward and in cached decoding, and the same greedy tokens, for Llama (untied
head), Qwen2 (q/k/v biases, sliding layers) and Gemma 3 (q/k norms, Gemma's switches, one KV
head); greedy speculative decoding of a fused target equals its autoregressive decoding; the
switch is refused by the save and export paths, and threads through ``load_model`` and the
decode CLI's keys."""

from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax.decode import DecodeConfig, generate
from specjax.drafters import ModelDrafter
from specjax.models import (
    Decoder,
    KVCache,
    checkpoint,
    fuse_projections,
    load_model,
    load_pretrained,
)
from specjax.models.pure import PureModel, truncated
from specjax.models.safetensors_loader import save_safetensors
from specjax.sampling import SamplingParams
from specjax.testing import tiny_config
from tests.family_fixtures import directory, reference

GREEDY = SamplingParams(temperature=0.0)
FAMILIES = ("llama", "qwen2", "gemma3_text")
TOL = 1e-5
SLOW = pytest.mark.slow


def families(slow=()):
    """Every family as a parameter, those in ``slow`` in the slow tier only."""
    return [pytest.param(f, marks=SLOW if f in slow else (), id=f) for f in FAMILIES]


@functools.cache
def models(family: str):
    """``(plain, fused)`` of a committed tiny family fixture."""
    plain = load_pretrained(directory(family)).model
    return plain, fuse_projections(plain)


@pytest.mark.parametrize("family", families())
def test_fused_layout(family):
    plain, fused = models(family)
    c = fused.config
    assert c.fused_projections and not plain.config.fused_projections
    g, r, e = c.num_kv_heads, c.num_heads // c.num_kv_heads, c.head_dim
    attn, mlp = fused.layers[0].attn, fused.layers[0].mlp
    assert attn.wqkv.shape == (c.dim, g, r + 2, e)
    assert mlp.w_gate_up.shape == (c.dim, 2, c.ffn_dim)
    assert not hasattr(attn, "wq") and not hasattr(mlp, "w_gate")
    assert attn.wqkv.get_metadata()["logical_axes"] == ("embed", "kv_heads", None, "head_dim")
    # query head g * R + r of the plain model sits at [g, r]; its KV head's k and v after it
    p = plain.layers[0].attn
    np.testing.assert_array_equal(attn.wqkv[:, :, :r].reshape(p.wq.shape), p.wq[...])
    np.testing.assert_array_equal(attn.wqkv[:, :, r], p.wk[...])
    np.testing.assert_array_equal(attn.wqkv[:, :, r + 1], p.wv[...])
    if c.qkv_bias:
        np.testing.assert_array_equal(attn.bqkv[:, r], p.bk[...])
    assert fused.embed[...] is plain.embed[...]  # what is not fused is shared, not copied
    assert fuse_projections(fused) is fused


@pytest.mark.parametrize("family", families())
def test_full_forward_logits_match(family):
    plain, fused = models(family)
    tokens = jnp.asarray([p[:12] for p in reference(family)["prompts"]])
    forward = jax.jit(lambda model, x: model(x).logits)
    want = forward(PureModel.of(plain), tokens)
    got = forward(PureModel.of(fused), tokens)
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)


@pytest.mark.parametrize("family", families())
def test_cached_decoding_logits_and_greedy_tokens_match(family):
    """A prefill then one-token steps (the decode loop's calls): each step's logits and keys
    within 1e-5, and the same greedy token."""
    plain, fused = models(family)
    prompt = jnp.asarray([reference(family)["prompts"][1]])
    call = jax.jit(lambda model, x, cache: model(x, cache=cache))
    pure = PureModel.of(plain), PureModel.of(fused)
    caches = [KVCache.init(m.config, 1, 64) for m in pure]
    tokens = prompt
    for _ in range(8):
        (a, ca, _), (b, cb, _) = (call(m, tokens, c) for m, c in zip(pure, caches, strict=True))
        np.testing.assert_allclose(b, a, atol=TOL, rtol=0)
        np.testing.assert_allclose(cb.k, ca.k, atol=TOL, rtol=0)
        tokens = jnp.argmax(a[:, -1:], axis=-1)
        assert jnp.array_equal(jnp.argmax(b[:, -1:], axis=-1), tokens)
        caches = [ca, cb]


@pytest.mark.parametrize("family", families(slow=("qwen2", "gemma3_text")))
def test_greedy_tokens_match(family):
    """Fused autoregressive decoding gives transformers' 32 greedy tokens, as the plain model
    does (tests/test_families.py), past the sliding windows."""
    ref = reference(family)
    out = generate(models(family)[1], ref["prompts"], DecodeConfig("autoregressive", GREEDY, 32))
    assert [list(map(int, t)) for t in out.tokens] == ref["greedy"]


SPECULATIVE = [  # the default tier: a chain (Qwen2)
    pytest.param(f, v, k, marks=() if (f, k) == ("qwen2", 1) else SLOW, id=f"{f}-{v}")
    for f in FAMILIES
    for v, k in (("greedy", 1), ("specinfer", 3))
]


@pytest.mark.parametrize("family, verifier, paths", SPECULATIVE)
def test_fused_target_speculative_equals_autoregressive(family, verifier, paths):
    """A fused target with its fused self-draft, as a chain and as a tree: transformers'
    greedy tokens."""
    fused = models(family)[1]
    ref = reference(family)
    layers = min(2, fused.config.num_layers - 1)
    drafter = ModelDrafter(truncated(fused, layers), num_paths=paths, draft_len=3, sampling=GREEDY)
    out = generate(fused, ref["prompts"], DecodeConfig(verifier, GREEDY, 32), drafter)
    assert [list(map(int, t)) for t in out.tokens] == ref["greedy"]
    assert out.metrics.accepted_tokens > 0, "no draft token was accepted: the check is trivial"


def test_fused_forward_has_three_fewer_gemms_per_layer_and_no_weight_concatenation():
    """In the compiled forward: 3 fewer dots per layer (q/k/v 3 -> 1, gate/up 2 -> 1) and the
    same concatenates as unfused (RoPE's, of activations): no weight is concatenated at run
    time."""
    plain = Decoder(tiny_config(qkv_bias=True), rngs=nnx.Rngs(0))
    tokens = jnp.ones((1, 4), jnp.int32)

    def ops(model):
        text = jax.jit(lambda m, x: m(x).logits).lower(PureModel.of(model), tokens)
        text = text.compile().as_text()
        return len(re.findall(r"= \S+ dot\(", text)), re.findall(r"= (\S+) concatenate\(", text)

    (dots, concats), (fused_dots, fused_concats) = ops(plain), ops(fuse_projections(plain))
    assert dots - fused_dots == 3 * plain.config.num_layers, (dots, fused_dots)
    assert sorted(fused_concats) == sorted(concats)


def test_fused_config_builds_the_fused_weights_of_the_same_seed():
    """``Decoder(fused config, seed)`` draws what ``fuse_projections(Decoder(config, seed))``
    holds, so a random fused model is the fused form of the plain one."""
    config = tiny_config(qkv_bias=True, qk_norm=True)
    plain = fuse_projections(Decoder(config, rngs=nnx.Rngs(3)))
    direct = Decoder(dataclasses.replace(config, fused_projections=True), rngs=nnx.Rngs(3))
    same = jax.tree.map(
        np.array_equal, nnx.to_pure_dict(nnx.state(plain)), nnx.to_pure_dict(nnx.state(direct))
    )
    assert all(jax.tree.leaves(same))
    pure = fuse_projections(PureModel.of(Decoder(config, rngs=nnx.Rngs(3))))  # PureModel in, out
    assert isinstance(pure, PureModel) and pure.config.fused_projections


def test_save_and_export_refuse_a_fused_model(tmp_path):
    """A fused model is a load-time form: a checkpoint or HF export of it is refused with one
    error naming the fix, before anything is written."""
    fused = fuse_projections(Decoder(tiny_config(), rngs=nnx.Rngs(0)))
    for save in (
        lambda: checkpoint.save(tmp_path / "ckpt", fused, fused.config),
        lambda: save_safetensors(tmp_path / "hf", checkpoint.to_params(fused), fused.config),
    ):
        with pytest.raises(ValueError, match=r"load time.*fuse_projections=True"):
            save()
    assert not list(tmp_path.iterdir())


def test_load_model_fuses():
    plain, _ = load_model("random:0")
    fused, _ = load_model("random:0", fuse_projections=True)
    assert fused.config.fused_projections
    tokens = jnp.asarray([[1, 2, 3, 4, 5]])
    np.testing.assert_allclose(fused(tokens).logits, plain(tokens).logits, atol=TOL, rtol=0)


def test_decode_cli_keys_build_fused_and_quantized_models():
    """``--config.fuse_projections`` / ``--config.weight_quant`` reach the target (and
    ``fuse_projections`` a draft model) when the CLI builds its models."""
    from specjax.cli import decode as runner
    from specjax.cli import validate
    from specjax.cli.checks import ConfigError
    from tests.test_decode_cli import load_config

    cfg = load_config("tiny_random")
    cfg.fuse_projections, cfg.weight_quant = True, "int8"
    validate.check_decode(cfg)
    with pytest.warns(UserWarning, match="slower than float32"):
        target, _, drafter, _ = runner.build(cfg)
    assert target.config.fused_projections and target.config.weight_quant == "int8"
    assert drafter.model.config.fused_projections and drafter.model.config.weight_quant is None
    bad = load_config("tiny_random")
    bad.weight_quant = "int4"  # (a non-bool fuse_projections: ml_collections refuses it)
    with pytest.raises(ConfigError, match="unknown weight_quant 'int4'; choose one of"):
        validate.check_decode(bad)


@pytest.mark.slow
def test_fused_int8_weights_on_a_mesh_give_the_single_device_tokens():
    """On 8 emulated CPU devices (2 x 4): wqkv, w_gate_up and their scales split by their
    logical axes (whether fused before placing or on the mesh), with G = 4 KV heads split and G
    = 2 replicated over the model axis; greedy GBV decoding of the fused int8 target gives its
    single-device autoregressive tokens (G = 4; both in the slow tier)."""
    from tests.test_sharding import run_check

    run_check("weights-quick")


@pytest.mark.slow
def test_fused_int8_weights_on_a_mesh_with_replicated_kv_heads():
    from tests.test_sharding import run_check

    run_check("weights")
