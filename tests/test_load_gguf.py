"""GGUF files: llama.cpp's Q/K permutation, float32 and Q8_0 weights against the NumPy reference,
the tokenizer and chat template they carry, Llama 3 RoPE scaling, errors that name the fix, and
the other families (Qwen, Gemma) as llama.cpp converts them: their metadata conventions, and
models that load as the ones they came from."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gguf
import jax
import numpy as np
import pytest
from safetensors.numpy import save_file

from specjax.models import config as cfgs
from specjax.models.gguf_loader import (
    SUPPORTED_TYPES,
    config_from_gguf,
    load_gguf,
    permute_qk,
    unpermute_qk,
)
from specjax.models.hf_config import config_from_hf, config_to_hf
from specjax.models.hf_params import param_shapes, params_to_hf
from specjax.models.rope import inverse_frequencies
from tests.gguf_families import convert
from tests.loader_fixtures import (
    assert_trees_equal,
    hf_reference_logits,
    logits_of,
    vocab_tokens,
    write_gguf,
)

FIXTURES = Path(__file__).parent / "fixtures" / "families"


def test_qk_permutation_round_trips():
    w = np.arange(4 * 8 * 3, dtype=np.float32).reshape(32, 3)
    perm = permute_qk(w, 4)
    assert not np.array_equal(perm, w)
    np.testing.assert_array_equal(unpermute_qk(perm, 4), w)
    # llama.cpp interleaves rotation pairs: head 0's rows become (0, 4, 1, 5, 2, 6, 3, 7).
    np.testing.assert_array_equal(perm[:8, 0], w[[0, 4, 1, 5, 2, 6, 3, 7], 0])


def test_gguf_f32_reproduces_logits_and_tokenizer(tmp_path, untied):
    config, params = untied
    hf = params_to_hf(params, config)
    path = write_gguf(tmp_path / "tiny.gguf", config, hf)
    loaded_cfg, loaded, tok = load_gguf(path)
    assert dataclasses.replace(loaded_cfg, name=config.name) == config
    assert loaded_cfg.name == "tiny-test"
    assert_trees_equal(loaded, params)
    np.testing.assert_allclose(
        logits_of(loaded_cfg, loaded), hf_reference_logits(hf, config), atol=2e-4, rtol=1e-4
    )
    assert (tok.bos_id, tok.eos_id, tok.vocab_size) == (1, 2, len(vocab_tokens()))
    ids = tok.encode("the hello <|im_end|>")
    assert tok.decode(ids) == "the hello <|im_end|>"
    assert 2 in ids and vocab_tokens().index("ll") in ids
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == (
        "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_gguf_llama3_rope_scaling_from_rope_freqs(tmp_path, untied):
    config, params = untied
    scaling = cfgs.RopeScaling(factor=8.0, original_max_position=1024)  # scales E's low freqs
    plain = inverse_frequencies(config.head_dim, config.rope_theta, None)
    factors = plain / inverse_frequencies(config.head_dim, config.rope_theta, scaling)
    assert factors.min() == 1 and factors.max() == 8 and len(set(factors.round(3))) == 3
    path = write_gguf(
        tmp_path / "l3.gguf",
        config,
        params_to_hf(params, config),
        raw={"rope_freqs.weight": factors.astype(np.float32)},
        extra_kv={"llama.rope.scaling.original_context_length": 1024},
    )
    loaded_cfg, loaded, _ = load_gguf(path)
    assert loaded_cfg.rope_scaling == scaling
    want = logits_of(dataclasses.replace(config, rope_scaling=scaling), params)
    np.testing.assert_array_equal(logits_of(loaded_cfg, loaded), want)
    assert not np.allclose(want, logits_of(config, params))  # the scaling matters here


def test_gguf_q8_0_within_quantization_error(tmp_path, tied):
    """Q8_0 stores blocks of 32 weights as int8 times one fp16 scale (amax / 127), so each weight
    moves by at most amax / 254 (~0.4% of its block's largest weight). The loaded params must
    equal the reference dequantization exactly, and the logits must stay within 2% of their
    range of the float model's (the observed error is ~10x smaller)."""
    config, params = tied
    hf = params_to_hf(params, config)
    path = write_gguf(tmp_path / "q8.gguf", config, hf, qtype=gguf.GGMLQuantizationType.Q8_0)
    loaded_cfg, loaded, _ = load_gguf(path)
    assert loaded_cfg.tie_embeddings
    q = gguf.GGMLQuantizationType.Q8_0
    embed = gguf.quants.dequantize(gguf.quants.quantize(hf["model.embed_tokens.weight"], q), q)
    np.testing.assert_array_equal(loaded["embed"], embed)
    err = np.abs(loaded["layers"][0]["mlp"]["w_up"] - params["layers"][0]["mlp"]["w_up"]).max()
    assert 0 < err <= np.abs(params["layers"][0]["mlp"]["w_up"]).max() / 254 + 1e-6
    want = hf_reference_logits(hf, config)
    got = logits_of(loaded_cfg, loaded)
    assert np.abs(got - want).max() < 0.02 * np.ptp(want)


def test_gguf_errors_name_the_fix(tmp_path, untied):
    config, params = untied
    hf = params_to_hf(params, config)
    with pytest.raises(FileNotFoundError, match=r"missing\.gguf not found.*fetch_smollm2"):
        load_gguf(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04 definitely not gguf")
    with pytest.raises(ValueError, match=r"junk\.gguf is not a GGUF file"):
        load_gguf(junk)
    good = write_gguf(tmp_path / "good.gguf", config, hf).read_bytes()
    for cut in (40, len(good) // 3, len(good) - 100):
        trunc = tmp_path / f"trunc{cut}.gguf"
        trunc.write_bytes(good[:cut])
        with pytest.raises(ValueError, match=rf"trunc{cut}\.gguf is a truncated or corrupt GGUF"):
            load_gguf(trunc)
    gpt2 = write_gguf(tmp_path / "gpt2.gguf", config, hf, arch="gpt2", tokenizer=False)
    with pytest.raises(ValueError, match=r'general\.architecture is "gpt2"; specjax loads llama'):
        load_gguf(gpt2)
    int8 = {"blk.0.attn_v.weight": np.zeros((16, 32), np.int8)}
    odd = write_gguf(tmp_path / "odd.gguf", config, hf, tokenizer=False, raw=int8)
    with pytest.raises(ValueError, match=r"tensor blk\.0\.attn_v\.weight has quantization type I8"):
        load_gguf(odd)
    with pytest.raises(ValueError, match="supported: " + ", ".join(SUPPORTED_TYPES)):
        load_gguf(odd)


# Families other than Llama: tests/gguf_families.py converts a HF directory as llama.cpp's
# convert_hf_to_gguf.py does; the slow tier (tests/test_gguf_families.py) checks both against
# transformers.

FAMILY_PROMPT = [3, 17, 5, 60, 2, 41, 9, 33, 12, 7, 58, 21, 30, 1, 44, 6, 27, 50, 11, 38]  # > W


def _hf_dir(tmp_path, config, params):
    """A ``save_pretrained``-like directory of specjax params (config.json, model.safetensors)."""
    d = tmp_path / config.name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config_to_hf(config)))
    save_file(params_to_hf(params, config), str(d / "model.safetensors"))
    return d


def _noisy_params(config, seed=0):
    """Random NumPy params, norm scales and biases included (a swapped one shows)."""
    rng = np.random.default_rng(seed)

    def draw(path, shape):
        key = str(path[-1].key)
        if key == "scale":
            return (0.0 if config.norm_plus_one else 1.0) + rng.normal(0, 0.3, shape)
        return rng.normal(0, 0.3 if key.startswith("b") else shape[0] ** -0.5, shape)

    shapes = param_shapes(config)
    is_shape = lambda x: isinstance(x, tuple)
    draws = jax.tree_util.tree_map_with_path(draw, shapes, is_leaf=is_shape)
    return jax.tree.map(lambda x: x.astype(np.float32), draws)


GEMMA3 = dict(
    family="gemma3_text",
    num_layers=6,
    num_kv_heads=1,
    head_dim=16,
    qk_norm=True,
    norm_plus_one=True,
    post_norms=True,
    embed_scale=True,
    activation="gelu_tanh",
    query_pre_attn_scalar=16.0,
    final_softcap=3.0,
    sliding_window=8,
    layer_types=("sliding",) * 5 + ("full",),
    rope_theta=1e6,
    rope_scaling=cfgs.RopeScaling(factor=4.0, kind="linear"),
    local_rope_theta=20000.0,
    tie_embeddings=True,
    vocab_size=64,
    name="g3",
)
GEMMA2 = dict(
    family="gemma2",
    num_layers=4,
    head_dim=16,
    norm_plus_one=True,
    post_norms=True,
    embed_scale=True,
    activation="gelu_tanh",
    query_pre_attn_scalar=16.0,
    attn_softcap=5.0,
    final_softcap=3.0,
    sliding_window=8,
    layer_types=("sliding", "full") * 2,
    tie_embeddings=True,
    vocab_size=64,
    name="g2",
)


def test_gguf_gemma3_from_numpy_equals_specjax(tmp_path):
    """Gemma 3 (q/k norms, 1 + w norms, post norms, 5:1 sliding layers with their own RoPE base,
    linear scaling on the global one, final soft-cap), converted as llama.cpp does, loads as the
    same config and the same model: norms come back from w + 1 (to 1 ulp), logits within 1e-5
    (measured: equal, as 1 + ((w + 1) - 1) is 1 + w in float32)."""
    config = cfgs.tiny(**GEMMA3)
    params = _noisy_params(config)
    path = convert(_hf_dir(tmp_path, config, params), tmp_path / "g3.gguf", name="g3")
    loaded_cfg, loaded, tok = load_gguf(path)
    assert loaded_cfg == config and tok is None
    for x, y in zip(jax.tree.leaves(loaded), jax.tree.leaves(params), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-6, rtol=0)
    want = logits_of(config, params, FAMILY_PROMPT)
    np.testing.assert_allclose(logits_of(loaded_cfg, loaded, FAMILY_PROMPT), want, atol=1e-5)


def test_gguf_fused_qkv_and_q8_0(tmp_path):
    """``--fuse-qkv`` files split back into q, k, v (Llama's permuted rows and biases too), and a
    Q8_0 Gemma 2 loads the reference dequantization with logits within quantization error."""
    llama = cfgs.tiny(qkv_bias=True, out_bias=True, head_dim=16, vocab_size=64, name="l")
    params = _noisy_params(llama)
    path = convert(_hf_dir(tmp_path, llama, params), tmp_path / "l.gguf", fuse_qkv=True)
    assert "blk.0.attn_qkv.bias" in {t.name for t in gguf.GGUFReader(path).tensors}
    loaded_cfg, loaded, _ = load_gguf(path)
    assert dataclasses.replace(loaded_cfg, name="l") == llama
    assert_trees_equal(loaded, params)

    config = cfgs.tiny(**GEMMA2)
    params = _noisy_params(config, seed=1)
    q8 = gguf.GGMLQuantizationType.Q8_0
    path = convert(_hf_dir(tmp_path, config, params), tmp_path / "g2.gguf", qtype=q8)
    loaded_cfg, loaded, _ = load_gguf(path)
    assert dataclasses.replace(loaded_cfg, name="g2") == config
    got_hf, want_hf = params_to_hf(loaded, config), params_to_hf(params, config)
    for name, x in want_hf.items():  # 2-D weights: Q8_0 exactly; norms (F32): w + 1 - 1
        if x.ndim == 2:
            x = gguf.quants.dequantize(gguf.quants.quantize(x, q8), q8)
        np.testing.assert_allclose(got_hf[name], x, atol=1e-6 if x.ndim == 1 else 0, rtol=0)
    want = logits_of(config, params, FAMILY_PROMPT)
    got = logits_of(loaded_cfg, loaded, FAMILY_PROMPT)
    assert 0 < np.abs(got - want).max() < 0.1 * np.ptp(want)  # measured 0.02-0.04: embeddings x 5.7


def test_gguf_of_transformers_fixtures_matches_their_logits(tmp_path):
    """The Qwen3 and Llama (Llama 3 RoPE scaling with an original context of 64, recovered from
    rope_freqs.weight) fixtures that transformers made, converted to GGUF: prompt logits within
    1e-4 of transformers' own (tests/fixtures/families; measured 7e-7 of the largest logit)."""
    for family in ("qwen3", "llama"):
        d = FIXTURES / family
        ref = json.loads((d / "reference.json").read_text())
        config, params, _ = load_gguf(convert(d, tmp_path / f"{family}.gguf"))
        assert config == config_from_hf(json.loads((d / "config.json").read_text()), config.name)
        prompt, want = ref["prompts"][-1], np.asarray(ref["prompt_logits"][-1])
        np.testing.assert_allclose(logits_of(config, params, prompt), want, atol=1e-4)


def _meta(arch, head_dim=None, **kv):
    """GGUF metadata of a tiny model (D 32, 4 layers, 4 heads), as llama.cpp's converter writes
    it: a head_dim is written as both key and value length."""
    if head_dim is not None:
        kv = {"attention.key_length": head_dim, "attention.value_length": head_dim, **kv}
    base = {
        "vocab_size": 64,
        "block_count": 4,
        "embedding_length": 32,
        "feed_forward_length": 64,
        "attention.head_count": 4,
        "attention.layer_norm_rms_epsilon": 1e-6,
    }
    meta = {f"{arch}.{k}": v for k, v in {**base, **kv}.items()}
    return {"general.architecture": arch, "general.name": "m", **meta}


SHAPES = {"token_embd.weight": (64, 32)}


def test_gguf_metadata_conventions_of_llama_cpp():
    """What llama.cpp's runtime does where the file is silent: Gemma 2 window 4096 on even
    layers, soft-caps 50 / 30; Gemma 3 slides only with a window key, 5 of 6 layers, local base
    10000; the 27B models' hard-coded score scale D / H; sliding_window_pattern as a period or
    a per-layer list; Mistral by name or by a window; Qwen has no window."""
    g2 = config_from_gguf(_meta("gemma2", 16), SHAPES)
    assert (g2.sliding_window, g2.layer_types[:2]) == (4096, ("sliding", "full"))
    assert (g2.attn_softcap, g2.final_softcap, g2.query_pre_attn_scalar) == (50.0, 30.0, 16.0)
    assert g2.rope_theta == 10000.0 and g2.local_rope_theta is None and g2.tie_embeddings
    big = config_from_gguf(_meta("gemma2", 16, block_count=46), {})
    assert big.query_pre_attn_scalar == 8.0  # 32 / 4, as Gemma 2 27B's 4608 / 32 = 144
    g3 = config_from_gguf(_meta("gemma3", 16, block_count=62), {})
    assert g3.sliding_window is None and set(g3.layer_types) == {"full"}
    assert g3.query_pre_attn_scalar == 8.0 and g3.final_softcap is None and g3.qk_norm
    g3 = config_from_gguf(_meta("gemma3", block_count=7, **{"attention.sliding_window": 8}), {})
    assert g3.layer_types == ("sliding",) * 5 + ("full", "sliding")
    assert (g3.local_rope_theta, g3.rope(0), g3.family) == (10000.0, (10000.0, None), "gemma3_text")
    pattern = {"attention.sliding_window": 8, "attention.sliding_window_pattern": 3}
    assert config_from_gguf(_meta("gemma3", **pattern), {}).layer_types[:3] == (
        "sliding",
        "sliding",
        "full",
    )
    pattern["attention.sliding_window_pattern"] = [False, True, True, False]
    assert config_from_gguf(_meta("gemma2", **pattern), {}).layer_types == (
        "full",
        "sliding",
        "sliding",
        "full",
    )
    mistral = _meta("llama", **{"attention.sliding_window": 8})
    assert config_from_gguf(mistral, {}).layer_types == ("sliding",) * 4
    assert config_from_gguf({**_meta("llama"), "general.name": "Mistral 7B"}, SHAPES).family == (
        "mistral"
    )
    qwen = _meta("qwen2", **{"attention.sliding_window": 8})
    qwen = config_from_gguf({k: v for k, v in qwen.items() if "vocab" not in k}, SHAPES)
    assert qwen.sliding_window is None and qwen.family == "qwen2" and qwen.vocab_size == 64
    linear = {"rope.scaling.type": "linear", "rope.scaling.factor": 8.0, "rope.freq_base": 1e6}
    g3 = config_from_gguf(_meta("gemma3", **{**pattern, **linear}), {})
    assert g3.rope(3) == (1e6, cfgs.RopeScaling(factor=8.0, kind="linear"))
    assert g3.rope(1) == (10000.0, None)


def test_gguf_refusals_are_one_line_naming_what_is_supported(tmp_path, untied):
    config, params = untied
    phi = write_gguf(tmp_path / "phi.gguf", config, params_to_hf(params, config), arch="phi3")
    with pytest.raises(ValueError) as err:
        load_gguf(phi)
    assert str(err.value).count("\n") == 0
    assert 'architecture is "phi3"; specjax loads llama, qwen2, qwen3, gemma2, gemma3' in str(
        err.value
    )
    cases = {
        "rope.scaling.type is 'yarn'; specjax implements linear": _meta(
            "qwen2", **{"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0}
        ),
        "feed_forward_length varies by layer": _meta("llama", feed_forward_length=[64, 128]),
        "value_length differs from the head size 16": _meta(
            "qwen3", **{"attention.key_length": 16, "attention.value_length": 8}
        ),
        "mixture-of-experts": _meta("llama", expert_count=8),
    }
    for message, meta in cases.items():
        with pytest.raises(ValueError, match=message):
            config_from_gguf(meta, SHAPES)
    with pytest.raises(ValueError, match=r"llama\.cpp ties gemma2's head"):
        config_from_gguf(_meta("gemma2", 16), {**SHAPES, "output.weight": (64, 32)})
