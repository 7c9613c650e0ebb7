"""A test-side HF -> GGUF converter for the families specjax loads, written from llama.cpp's
``convert_hf_to_gguf.py`` (ggml-org/llama.cpp 0c1e57098: ``conversion/base.py`` ``TextModel`` and
``ModelBase.prepare_tensors``, ``conversion/llama.py`` ``LlamaModel``, ``conversion/qwen.py``
``Qwen2Model`` / ``Qwen3Model``, ``conversion/gemma.py`` ``Gemma2Model`` / ``Gemma3Model``), with
the ``gguf`` package's ``GGUFWriter`` and its tensor-name map. It shares no code with specjax's
loader, so a convention both got wrong the same way would need two mistakes.

It reads what ``convert_hf_to_gguf.py`` reads (``config.json`` and ``model.safetensors`` of a
directory that ``save_pretrained`` wrote: tied models hold no ``lm_head.weight``), in NumPy
only, so the default tier can use it without torch. Left out: tokenizer export (pass
``tokenizer`` to write one), Gemma 3 dropping embedding rows past its tokenizer, yarn / longrope
scaling, MoE, multimodal towers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

ARCHS = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",  # LlamaModel is registered for both
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
}

_FTYPES = {
    None: gguf.LlamaFileType.ALL_F32,
    gguf.GGMLQuantizationType.F16: gguf.LlamaFileType.MOSTLY_F16,
    gguf.GGMLQuantizationType.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
}


def _find(cfg: dict, keys):
    return next((cfg[k] for k in keys if k in cfg), None)


def rope_parameters(cfg: dict) -> dict:
    """``TextModel.__init__``'s ``self.rope_parameters``: ``rope_parameters`` (transformers 5)
    or ``rope_scaling``, with hub-style top-level keys mirrored in."""
    rope = dict(cfg.get("rope_parameters", cfg.get("rope_scaling")) or {})
    theta = _find(
        cfg,
        [
            "global_rope_theta",
            "rope_global_theta",
            "rope_theta_global",
            "rope_theta",
            "rotary_emb_base",
        ],
    )
    local = _find(
        cfg,
        [
            "local_rope_theta",
            "rope_local_theta",
            "rope_theta_local",
            "swa_rope_theta",
            "rope_local_base_freq",
        ],
    )
    if "full_attention" not in rope and "sliding_attention" not in rope:
        if local is not None:
            rope["sliding_attention"] = {"rope_theta": local}
        if "rope_theta" not in rope and theta is not None:
            rope["rope_theta"] = theta
        if "rope_type" not in rope and rope.get("type") is not None:
            rope["rope_type"] = rope["type"]
    return rope


def _text_model_kv(cfg: dict, rope: dict, ftype) -> dict:
    """``TextModel.set_gguf_parameters``: {GGUFWriter method: value}."""
    kv = {"add_block_count": cfg["num_hidden_layers"]}
    if "max_position_embeddings" in cfg:
        kv["add_context_length"] = cfg["max_position_embeddings"]
    kv["add_embedding_length"] = cfg["hidden_size"]
    kv["add_feed_forward_length"] = cfg["intermediate_size"]
    kv["add_head_count"] = cfg["num_attention_heads"]
    if cfg.get("num_key_value_heads") is not None:
        kv["add_head_count_kv"] = cfg["num_key_value_heads"]
    full = rope.get("full_attention", rope)
    kind = full.get("rope_type")
    if kind == "linear" and full.get("factor") is not None:
        kv["add_rope_scaling_type"] = gguf.RopeScalingType.LINEAR
        kv["add_rope_scaling_factor"] = full["factor"]
    elif kind not in (None, "default", "llama3", "linear"):
        raise NotImplementedError(f"the test converter writes no {kind} RoPE scaling")
    if full.get("rope_theta") is not None:
        kv["add_rope_freq_base"] = full["rope_theta"]
    if rope.get("sliding_attention", {}).get("rope_theta") is not None:
        kv["add_rope_freq_base_swa"] = rope["sliding_attention"]["rope_theta"]
    kv["add_layer_norm_rms_eps"] = cfg["rms_norm_eps"]
    if cfg.get("head_dim") is not None:
        kv["add_key_length"] = kv["add_value_length"] = cfg["head_dim"]
    kv["add_file_type"] = ftype
    return kv


def metadata(arch: str, cfg: dict, rope: dict, ftype) -> dict:
    """Each model class's ``set_gguf_parameters``: {GGUFWriter method: value}."""
    if arch == "gemma2":  # Gemma2Model writes its own list (no RoPE base: the runtime's 10000)
        return {
            "add_context_length": cfg["max_position_embeddings"],
            "add_embedding_length": cfg["hidden_size"],
            "add_block_count": cfg["num_hidden_layers"],
            "add_feed_forward_length": cfg["intermediate_size"],
            "add_head_count": cfg["num_attention_heads"],
            "add_head_count_kv": cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
            "add_layer_norm_rms_eps": cfg["rms_norm_eps"],
            "add_key_length": cfg["head_dim"],
            "add_value_length": cfg["head_dim"],
            "add_file_type": ftype,
            "add_attn_logit_softcapping": cfg["attn_logit_softcapping"],
            "add_final_logit_softcapping": cfg["final_logit_softcapping"],
            "add_sliding_window": cfg["sliding_window"],
        }
    kv = _text_model_kv(cfg, rope, ftype)
    if arch == "llama":
        kv["add_vocab_size"] = cfg["vocab_size"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        kv["add_rope_dimension_count"] = head_dim
    if arch == "gemma3":
        kv["add_context_length"] = cfg.get("max_position_embeddings", 131072)
        kv["add_head_count"] = cfg.get("num_attention_heads", 8)
        kv["add_layer_norm_rms_eps"] = cfg.get("rms_norm_eps", 1e-6)
        kv["add_key_length"] = kv["add_value_length"] = cfg.get("head_dim", 256)
        kv["add_rope_freq_base"] = rope.get("full_attention", rope).get("rope_theta", 1e6)
        assert cfg.get("attn_logit_softcapping") is None
        if cfg.get("final_logit_softcapping"):
            kv["add_final_logit_softcapping"] = cfg["final_logit_softcapping"]
        if cfg.get("sliding_window_pattern") != 1:
            kv["add_sliding_window"] = cfg["sliding_window"]
        kv["add_head_count_kv"] = cfg.get("num_key_value_heads", 4)
    return kv


def llama_permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """``LlamaModel.permute``."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def llama3_rope_factors(cfg: dict, rope: dict) -> np.ndarray | None:
    """``LlamaModel.generate_extra_tensors``: ``rope_freqs.weight`` of Llama 3 scaling."""
    params = rope.get("full_attention", rope)
    if str(params.get("rope_type", "")).lower() != "llama3":
        return None
    base = params.get("rope_theta", 10000.0)
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor = params.get("factor", 8.0)
    low, high = params.get("low_freq_factor", 1.0), params.get("high_freq_factor", 4.0)
    old = params.get("original_max_position_embeddings", 8192)
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, np.float32)


def convert(
    model_dir,
    out,
    *,
    qtype=None,
    name: str | None = None,
    fuse_qkv: bool = False,
    tokenizer: Callable[[gguf.GGUFWriter], None] | None = None,
    extra_kv: dict | None = None,
) -> Path:
    """Writes ``out``, the GGUF llama.cpp's converter makes of the HF directory ``model_dir``.

    Args:
      qtype: None (``--outtype f32``), ``F16`` or ``Q8_0``: the type of 2-D weights (1-D tensors
        and norms stay F32; a Q8_0 row that does not split into blocks falls back to F16).
      name: ``general.name`` (default: the directory name).
      fuse_qkv: ``--fuse-qkv``: one ``attn_qkv`` tensor per block.
      tokenizer: writes ``tokenizer.ggml.*`` keys, if given.
      extra_kv: more ``{GGUFWriter method: value}`` (a test's addition, not the converter's).
    """
    model_dir, out = Path(model_dir), Path(out)
    cfg = json.loads((model_dir / "config.json").read_text())
    if "text_config" in cfg:
        cfg = {**cfg, **cfg["text_config"]}
    arch = ARCHS[cfg["architectures"][0]]
    rope = rope_parameters(cfg)
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_name(name or model_dir.name)
    for method, value in {**metadata(arch, cfg, rope, _FTYPES[qtype]), **(extra_kv or {})}.items():
        getattr(writer, method)(value)
    if tokenizer is not None:
        tokenizer(writer)
    names = gguf.get_tensor_name_map(
        getattr(gguf.MODEL_ARCH, arch.upper()), cfg["num_hidden_layers"]
    )
    tensors = dict(load_file(str(model_dir / "model.safetensors")))
    factors = llama3_rope_factors(cfg, rope) if arch == "llama" else None
    out_tensors = {} if factors is None else {"rope_freqs.weight": factors}
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads")
    for hf, x in tensors.items():
        if hf.endswith((".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")):
            continue
        if arch == "gemma2" and hf == "lm_head.weight":  # Gemma2Model.filter_tensors
            continue
        x = np.asarray(x, np.float32)
        if arch == "llama" and hf.endswith(("q_proj.weight", "q_proj.bias")):
            x = llama_permute(x, heads, heads)
        elif arch == "llama" and hf.endswith(("k_proj.weight", "k_proj.bias")):
            x = llama_permute(x, heads, kv_heads)
        if arch in ("gemma2", "gemma3") and hf.endswith("norm.weight"):
            x = x + 1
        new = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ValueError(f"Can not map tensor {hf!r}")
        out_tensors[new] = x
    if fuse_qkv:
        for new in [n for n in out_tensors if ".attn_q." in n]:
            parts = [out_tensors.pop(new.replace(".attn_q.", f".attn_{x}.")) for x in "qkv"]
            out_tensors[new.replace(".attn_q.", ".attn_qkv.")] = np.concatenate(parts, axis=0)
    for new, x in out_tensors.items():
        kind = qtype or gguf.GGMLQuantizationType.F32
        if x.ndim <= 1 or new.endswith("_norm.weight"):
            kind = gguf.GGMLQuantizationType.F32
        try:
            data = gguf.quants.quantize(x, kind)
        except gguf.QuantError:
            kind = gguf.GGMLQuantizationType.F16
            data = gguf.quants.quantize(x, kind)
        writer.add_tensor(new, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


# tokenizer.ggml.model / .pre of each family's real GGUFs (set_vocab: _set_vocab_sentencepiece
# for Gemma and Mistral v0.1-v0.3, _set_vocab_gpt2 with the pre-tokenizer's hash name otherwise).
TOKENIZER_KINDS = {
    "llama": ("gpt2", "llama-bpe"),
    "mistral": ("llama", None),
    "qwen2": ("gpt2", "qwen2"),
    "qwen3": ("gpt2", "qwen2"),
    "gemma2": ("llama", None),
    "gemma3": ("llama", None),
}


def toy_tokenizer(family: str, vocab_size: int) -> Callable[[gguf.GGUFWriter], None]:
    """A ``tokenizer`` for :func:`convert`: ``vocab_size`` made-up tokens of the kind the
    family's GGUFs carry (``gpt2`` byte-level BPE or SentencePiece ``llama``), no merges."""
    model, pre = TOKENIZER_KINDS[family]

    def write(w: gguf.GGUFWriter) -> None:
        w.add_tokenizer_model(model)
        if pre is not None:
            w.add_tokenizer_pre(pre)
        if model == "llama":
            tokens = ["<unk>", "<s>", "</s>"] + [f"\u2581t{i}" for i in range(3, vocab_size)]
            w.add_token_scores([-float(i) for i in range(vocab_size)])
            w.add_token_types([2, 3, 3] + [1] * (vocab_size - 3))
        else:
            tokens = [chr(0x100 + i) for i in range(vocab_size - 1)] + ["<|endoftext|>"]
            w.add_token_types([1] * (vocab_size - 1) + [3])
            w.add_token_merges([])
        w.add_token_list(tokens)
        w.add_bos_token_id(1 if model == "llama" else vocab_size - 1)
        w.add_eos_token_id(2 if model == "llama" else vocab_size - 1)

    return write
