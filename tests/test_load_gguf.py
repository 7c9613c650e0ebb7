"""GGUF files: llama.cpp's Q/K permutation, float32 and Q8_0 weights against the NumPy reference,
the tokenizer and chat template they carry, Llama 3 RoPE scaling, and errors that name the fix."""

from __future__ import annotations

import dataclasses

import gguf
import numpy as np
import pytest

from specjax.models import config as cfgs
from specjax.models.gguf_loader import SUPPORTED_TYPES, load_gguf, permute_qk, unpermute_qk
from specjax.models.rope import inverse_frequencies
from specjax.models.safetensors_loader import params_to_hf
from tests.loader_fixtures import (
    assert_trees_equal,
    hf_reference_logits,
    logits_of,
    vocab_tokens,
    write_gguf,
)


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
