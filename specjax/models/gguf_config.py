"""GGUF metadata -> :class:`~specjax.models.config.ModelConfig` for the architectures specjax loads.

Metadata, as llama.cpp's converter writes it and its runtime reads it (sources as in
:mod:`specjax.models.gguf_loader`; ``{a}`` is ``general.architecture``). Where a file leaves a
value out, it takes the runtime's default, not transformers':

* Architectures ``llama`` (also Mistral: ``MistralForCausalLM`` converts through ``LlamaModel``;
  the family is labelled ``mistral`` when ``general.name`` / ``basename`` says so, the guess
  transformers' GGUF loader makes too), ``qwen2``, ``qwen3``, ``gemma2``, ``gemma3``.
* ``{a}.attention.key_length`` is the head size (default ``embedding_length / head_count``;
  ``value_length`` and ``rope.dimension_count`` must equal it: ``llama_model::load_hparams``);
  per-layer head counts / FFN widths (arrays) must be uniform.
* ``{a}.rope.freq_base`` (default 10000; ``Gemma2Model`` never writes it), and
  ``rope.scaling.type`` (default ``linear``) with ``rope.scaling.factor`` (or the older
  ``rope.scale_linear``; 0 or 1: none): ``linear`` only, on the full-attention layers of Gemma 3
  (its sliding layers keep scale 1), on every layer otherwise. Llama 3's scaling is no key but
  ``rope_freqs.weight`` (``LlamaModel.generate_extra_tensors``): per-frequency divisors, matched
  to Llama 3.1's formula (low/high factors 1 and 4, the original context from
  ``rope.scaling.original_context_length``, from the divisors, or 8192).
* Sliding windows (``{a}.attention.sliding_window``, ``sliding_window_pattern``, read by
  ``load_swa_pattern`` as a per-layer bool array or a period n: layer i slides iff
  ``i % n < n - 1``): ``gemma2`` window default 4096, period default 2; ``gemma3`` slides only
  if the window key is there and > 0, period default 6 (``Gemma3Model`` writes no pattern).
  ``llama`` and ``qwen*`` runtimes read no window (a Mistral GGUF carries none: llama.cpp
  attends to everything); specjax honours a ``llama.attention.sliding_window`` if a file has
  one (every layer, family ``mistral``) and ignores one on Qwen, as transformers does without
  ``use_sliding_window``.
* Gemma 3's sliding layers: RoPE base ``{a}.rope.freq_base_swa`` (written from
  ``rope_parameters.sliding_attention``, else the runtime's 10000), no scaling. Gemma 2's take
  the global base and scaling unless ``freq_base_swa`` is given.
* Soft-capping: ``{a}.attn_logit_softcapping`` / ``final_logit_softcapping``: Gemma 2 always
  caps (defaults 50 and 30: ``llama_hparams``), Gemma 3 caps the logits only if the key is
  there and nonzero, never the scores.
* ``query_pre_attn_scalar`` is in no key: the runtime hard-codes it by size
  (``f_attention_scale``): Gemma 2 27B (46 blocks) and Gemma 3 27B (62 blocks) scale scores by
  ``(embedding_length / head_count) ** -0.5``, every other Gemma by ``head_dim ** -0.5``.
* Tied iff there is no ``output.weight``; a ``gemma2`` runtime is always tied, so one with
  ``output.weight`` is refused. The vocabulary is ``{a}.vocab_size`` or ``token_embd``'s rows
  (Gemma 3's converter drops the padding rows past the tokenizer).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specjax.models.config import ModelConfig, RopeScaling
from specjax.models.rope import inverse_frequencies

ARCHITECTURES = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
}
"""``general.architecture`` values specjax loads -> the family (``llama`` may become
``mistral``)."""

_SWA_DEFAULTS = {"gemma2": (4096, 2), "gemma3": (None, 6)}  # (window, pattern) of the runtime
_BIG_GEMMA = {"gemma2": 46, "gemma3": 62}  # block counts whose scores scale by (D / H) ** -0.5


def config_from_gguf(meta: dict, shapes: dict[str, tuple], path: str = "gguf") -> ModelConfig:
    """A :class:`ModelConfig` from GGUF ``{arch}.*`` metadata (conventions: module docstring).

    Args:
      meta: the GGUF metadata.
      shapes: ``{tensor name: [out, in] shape}``; the model is tied iff there is no
        ``output.weight``, has q/k/v (output) biases iff the blocks hold them; the vocabulary
        size falls back to ``token_embd.weight``'s rows.
      path: the file, for error messages.

    Raises:
      ValueError: another architecture (one line naming those supported), missing keys, or a
        value specjax does not implement.
    """
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(
            f'{path}: general.architecture is "{arch}"; specjax loads {", ".join(ARCHITECTURES)} '
            "(Llama, Mistral, Qwen2/2.5, Qwen3, Gemma 2, Gemma 3 text) GGUFs"
        )
    missing = object()

    def get(key, default=missing):
        value = meta.get(f"{arch}.{key}", default)
        if value is missing:
            raise ValueError(f"{path}: GGUF metadata lacks {arch}.{key}; the file is incomplete")
        if isinstance(value, list) and key.endswith(("head_count", "head_count_kv", "length")):
            if len(set(value)) != 1:
                raise ValueError(f"{path}: {arch}.{key} varies by layer; specjax needs one value")
            value = value[0]
        return value

    if get("expert_count", 0):
        raise ValueError(f"{path}: mixture-of-experts GGUFs ({arch}.expert_count) are unsupported")
    heads, dim = int(get("attention.head_count")), int(get("embedding_length"))
    layers = int(get("block_count"))
    head_dim = int(get("attention.key_length", dim // heads))
    for key in ("attention.value_length", "rope.dimension_count"):
        if int(get(key, dim // heads if key.endswith("value_length") else head_dim)) != head_dim:
            raise ValueError(
                f"{path}: {arch}.{key} differs from the head size {head_dim}; specjax needs equal "
                "key/value head sizes and rotates every dimension of a head"
            )
    for key in ("attention.key_length_swa", "attention.value_length_swa"):
        if int(get(key, head_dim)) != head_dim:
            raise ValueError(f"{path}: {arch}.{key} differs from the head size {head_dim}")
    if arch == "gemma2" and "output.weight" in shapes:
        raise ValueError(f"{path}: a gemma2 GGUF has output.weight; llama.cpp ties gemma2's head")
    vocab = meta.get(f"{arch}.vocab_size") or shapes.get("token_embd.weight", (0,))[0]
    if not vocab:
        raise ValueError(f"{path}: neither {arch}.vocab_size nor token_embd.weight; incomplete")
    name = str(meta.get("general.name") or Path(path).stem)
    window, kinds = _sliding(meta, arch, layers, path)
    labels = f"{name} {meta.get('general.basename', '')}".lower()
    family = (
        "mistral" if arch == "llama" and (window or "mistral" in labels) else ARCHITECTURES[arch]
    )
    scaling = _rope_scaling(get, arch, path)
    gemma = arch in _SWA_DEFAULTS
    local = None
    if arch == "gemma3":  # the sliding layers: their own base, no scaling
        local = (_f32(get("rope.freq_base_swa", 10000.0)), None)
    elif arch == "gemma2" and get("rope.freq_base_swa", None) is not None:
        local = (_f32(get("rope.freq_base_swa")), scaling)
    big = _BIG_GEMMA.get(arch) == layers

    def has(kind):
        return any(n.startswith("blk.") and n.endswith(kind) for n in shapes)

    return ModelConfig(
        vocab_size=int(vocab),
        dim=dim,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(get("attention.head_count_kv", heads)),
        ffn_dim=int(get("feed_forward_length")),
        head_dim=head_dim,
        norm_eps=_f32(get("attention.layer_norm_rms_epsilon")),
        rope_theta=_f32(get("rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        max_seq_len=int(get("context_length", 2048)),
        tie_embeddings="output.weight" not in shapes,
        name=name,
        family=family,
        qkv_bias=has(".attn_q.bias") or has(".attn_qkv.bias"),
        out_bias=has(".attn_output.bias"),
        qk_norm=arch in ("qwen3", "gemma3"),
        norm_plus_one=gemma,
        post_norms=gemma,
        embed_scale=gemma,
        activation="gelu_tanh" if gemma else "silu",
        query_pre_attn_scalar=float(dim // heads if big else head_dim) if gemma else None,
        attn_softcap=_cap(get("attn_logit_softcapping", 50.0)) if arch == "gemma2" else None,
        final_softcap=_cap(get("final_logit_softcapping", 30.0 if arch == "gemma2" else None))
        if gemma
        else None,
        sliding_window=window,
        layer_types=kinds,
        local_rope_theta=local[0] if local else None,
        local_rope_scaling=local[1] if local else None,
    )


def _sliding(meta: dict, arch: str, layers: int, path) -> tuple[int | None, tuple[str, ...]]:
    """``(sliding_window, layer_types)`` as llama.cpp's runtime derives them for ``arch``."""
    if arch in ("qwen2", "qwen3"):
        return None, ("full",) * layers
    window, period = _SWA_DEFAULTS.get(arch, (None, None))
    window = int(meta.get(f"{arch}.attention.sliding_window", window) or 0) or None
    if window is None:
        return None, ("full",) * layers
    if arch == "llama":
        return window, ("sliding",) * layers
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern", period)
    if isinstance(pattern, list):
        if len(pattern) < layers:
            raise ValueError(
                f"{path}: {arch}.attention.sliding_window_pattern has {len(pattern)} entries for "
                f"{layers} layers"
            )
        slides = [bool(x) for x in pattern[:layers]]
    else:
        n = int(pattern)
        slides = [n == 0 or i % n < n - 1 for i in range(layers)]
    kinds = tuple("sliding" if s else "full" for s in slides)
    return (window if any(slides) else None), kinds


def _rope_scaling(get, arch: str, path) -> RopeScaling | None:
    """The full-attention layers' RoPE scaling from ``rope.scaling.*`` (Llama 3's comes from
    ``rope_freqs.weight`` later)."""
    kind = str(get("rope.scaling.type", "linear"))
    factor = float(get("rope.scaling.factor", get("rope.scale_linear", 0.0)) or 0.0)
    if kind == "none" or (kind == "linear" and factor in (0.0, 1.0)):
        return None
    if kind != "linear":
        raise ValueError(
            f"{path}: {arch}.rope.scaling.type is {kind!r}; specjax implements linear RoPE "
            "scaling and Llama 3's (rope_freqs.weight)"
        )
    return RopeScaling(factor=_f32(factor), kind="linear")


def _f32(x) -> float:
    """A float32 metadata value as the decimal it was written from (1e-5, not 9.99999974e-06)."""
    return float(f"{float(x):.7g}")


def _cap(x) -> float | None:
    return None if x is None or float(x) == 0 else _f32(x)


def llama3_scaling(config: ModelConfig, meta: dict, factors: np.ndarray, path) -> RopeScaling:
    """Recovers Llama-3 RoPE scaling from llama.cpp's ``rope_freqs.weight`` (per-frequency
    divisors): Llama 3.1's low/high factors (1, 4), the original context from the metadata, else
    solved from a divisor between 1 and the factor, else 8192; checked against every divisor."""
    factors = factors.reshape(-1).astype(np.float64)
    top = float(factors.max())
    plain = inverse_frequencies(config.head_dim, config.rope_theta, None)
    olds = [int(meta.get("llama.rope.scaling.original_context_length", 0))]
    for f, inv in zip(factors, plain, strict=True):
        if 1.0001 < f < top * 0.9999:  # medium band: 1/f = (1 - s)/top + s, s = (old/wl - 1)/3
            s = (1 / f - 1 / top) / (1 - 1 / top)
            olds.append(round(2 * np.pi / inv * (3 * s + 1)))
    for old in [*olds, 8192]:
        if old > 0:
            scaling = RopeScaling(factor=_f32(top), original_max_position=old)
            scaled = inverse_frequencies(config.head_dim, config.rope_theta, scaling)
            if np.allclose(plain / scaled, factors, rtol=1e-3):
                return scaling
    raise ValueError(f"{path}: rope_freqs.weight is not a Llama-3 RoPE scaling specjax knows")
