"""Tiny Llama weights, GGUF files and a NumPy reference forward shared by the loader tests.

Every loader is checked against an independent NumPy forward pass written in Hugging Face
conventions (``[out, in]`` weights, rotate-half RoPE, ``repeat_kv``), so a layout bug that a
save/load round trip would hide still fails there.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.models import Decoder
from specjax.models import config as cfgs
from specjax.models.gguf_loader import permute_qk
from specjax.models.pretrained import build_model

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "l l"]
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nBe kind.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TOKENS = [1, 5, 7, 30, 2, 9, 100, 261]  # one prompt, valid for every vocabulary below


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


def tiny_config(**kw) -> cfgs.ModelConfig:
    return cfgs.tiny(vocab_size=len(vocab_tokens()), **kw)


def random_params(config, seed=0) -> dict:
    model = Decoder(config, rngs=nnx.Rngs(seed))
    params = jax.tree.map(np.asarray, nnx.to_pure_dict(nnx.state(model)))
    rng = np.random.default_rng(seed)
    for layer in params["layers"].values():  # non-trivial norm scales catch swapped norms
        for norm in ("attn_norm", "mlp_norm"):
            layer[norm]["scale"] = rng.uniform(0.5, 1.5, layer[norm]["scale"].shape).astype(
                np.float32
            )
    return params


def logits_of(config, params, tokens=TOKENS) -> np.ndarray:
    return np.asarray(build_model(config, params)(jnp.asarray([tokens])).logits)[0]


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
