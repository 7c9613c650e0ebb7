"""Hugging Face ``config.json`` <-> :class:`ModelConfig`, for every family specjax runs.

Both styles found in the wild are read: what transformers >= 5 writes (``rope_parameters``, per
layer type for Gemma 3, and ``layer_types``) and the top-level keys that checkpoints on the hub
carry (``rope_theta``, ``rope_scaling``, ``sliding_window_pattern``, ``rope_local_base_freq``,
``use_sliding_window`` / ``max_window_layers``). A key absent from the file takes the default of
transformers' config class for that family, so a file means here what it means there.

Anything specjax does not implement (another architecture, a RoPE scaling type, MLP biases,
partial rotary embeddings, bidirectional attention, another activation) is one ``ValueError``
naming the key and what is supported, raised before any weight is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from specjax.models.config import ModelConfig, RopeScaling

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text")
"""``model_type`` values specjax decodes (``gemma3``, Gemma 3's multimodal wrapper, is read
through its ``text_config``)."""

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
}

ROPE_TYPES = ("default", "llama3", "linear")
"""``rope_type`` values specjax implements."""

GEMMA = ("gemma2", "gemma3_text")

# transformers' defaults for keys a config.json may leave out, where they differ by family.
_DEFAULTS = {
    "llama": dict(rope_theta=10000.0, tie_word_embeddings=False, rms_norm_eps=1e-6),
    "mistral": dict(rope_theta=10000.0, tie_word_embeddings=False, rms_norm_eps=1e-6),
    "qwen2": dict(rope_theta=10000.0, tie_word_embeddings=False, rms_norm_eps=1e-6),
    "qwen3": dict(rope_theta=10000.0, tie_word_embeddings=False, rms_norm_eps=1e-6, head_dim=128),
    "gemma2": dict(
        rope_theta=10000.0,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        head_dim=256,
        query_pre_attn_scalar=256,
        sliding_window=4096,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
    ),
    "gemma3_text": dict(
        rope_theta=1_000_000.0,
        rope_local_base_freq=10000.0,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        head_dim=256,
        query_pre_attn_scalar=256,
        sliding_window=4096,
        sliding_window_pattern=6,
        attn_logit_softcapping=None,
        final_logit_softcapping=None,
    ),
}
_ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}


def text_config(cfg: Mapping) -> Mapping:
    """The decoder's part of a ``config.json``: Gemma 3's multimodal ``gemma3`` configs hold it
    under ``text_config``."""
    if cfg.get("model_type") == "gemma3" and isinstance(cfg.get("text_config"), Mapping):
        return {"model_type": "gemma3_text", **cfg["text_config"]}
    return cfg


def config_from_hf(cfg: Mapping, name: str = "model") -> ModelConfig:
    """Maps a HF ``config.json`` dict (either style) to a :class:`ModelConfig`.

    Raises:
      ValueError: a ``model_type`` outside :data:`FAMILIES`, or a key whose value specjax does
        not implement (the message names the key and what is supported).
    """
    cfg = text_config(cfg)
    family = cfg.get("model_type", "llama")
    if family not in FAMILIES:
        raise ValueError(
            f'config.json model_type is "{family}"; specjax decodes {", ".join(FAMILIES)} '
            "(and gemma3's text model)"
        )
    cfg = {**_DEFAULTS[family], **{k: v for k, v in cfg.items() if v is not None or k in _NULLABLE}}
    _refuse_unsupported(cfg, family)
    heads = int(cfg["num_attention_heads"])
    layers = int(cfg["num_hidden_layers"])
    gemma = family in GEMMA
    bias = bool(cfg.get("attention_bias", False))
    window, kinds = _sliding(cfg, family, layers)
    (theta, scaling), local = _rope(cfg, family)
    act_key = "hidden_activation" if gemma and "hidden_activation" in cfg else "hidden_act"
    return ModelConfig(
        vocab_size=int(cfg["vocab_size"]),
        dim=int(cfg["hidden_size"]),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        ffn_dim=int(cfg["intermediate_size"]),
        head_dim=cfg.get("head_dim"),
        norm_eps=float(cfg["rms_norm_eps"]),
        rope_theta=theta,
        rope_scaling=scaling,
        max_seq_len=int(cfg.get("max_position_embeddings", 2048)),
        tie_embeddings=bool(cfg["tie_word_embeddings"]),
        name=name,
        family=family,
        qkv_bias=bias or family == "qwen2",
        out_bias=bias,
        qk_norm=family in ("qwen3", "gemma3_text"),
        norm_plus_one=gemma,
        post_norms=gemma,
        embed_scale=gemma,
        activation=_ACTIVATIONS[cfg.get(act_key, "gelu_pytorch_tanh" if gemma else "silu")],
        query_pre_attn_scalar=float(cfg["query_pre_attn_scalar"]) if gemma else None,
        attn_softcap=_opt_float(cfg.get("attn_logit_softcapping")) if gemma else None,
        final_softcap=_opt_float(cfg.get("final_logit_softcapping")) if gemma else None,
        sliding_window=window,
        layer_types=kinds,
        local_rope_theta=local[0] if local else None,
        local_rope_scaling=local[1] if local else None,
    )


# Keys whose explicit null means something (no soft-capping, no window).
_NULLABLE = ("attn_logit_softcapping", "final_logit_softcapping", "sliding_window")


def _opt_float(x) -> float | None:
    return None if x is None else float(x)


def _refuse_unsupported(cfg: Mapping, family: str) -> None:
    def fail(key, what):
        raise ValueError(f"config.json {key}={cfg[key]!r}: {what}")

    act_key = "hidden_activation" if "hidden_activation" in cfg else "hidden_act"
    if act_key in cfg and cfg[act_key] not in _ACTIVATIONS:
        fail(act_key, f"specjax's MLP gates are {', '.join(_ACTIVATIONS)}")
    if cfg.get("mlp_bias"):
        fail("mlp_bias", "specjax's MLP has no biases")
    if cfg.get("partial_rotary_factor", 1.0) not in (1, 1.0, None):
        fail("partial_rotary_factor", "specjax rotates every dimension of a head (1.0)")
    if cfg.get("use_bidirectional_attention"):
        fail("use_bidirectional_attention", "specjax decodes causally")
    types = cfg.get("layer_types")
    if types is not None and not set(types) <= set(_LAYER_TYPES):
        fail("layer_types", f"specjax's layer types are {', '.join(_LAYER_TYPES)}")
    if family not in GEMMA and cfg.get("attn_logit_softcapping") is not None:
        fail("attn_logit_softcapping", f"soft-capping is read for {', '.join(GEMMA)} only")


def _sliding(cfg: Mapping, family: str, layers: int) -> tuple[int | None, tuple[str, ...]]:
    """``(sliding_window, layer_types)`` as transformers derives them for the family."""
    window = None if family == "llama" else cfg.get("sliding_window")
    if family in ("qwen2", "qwen3") and not cfg.get("use_sliding_window", False):
        window = None  # Qwen keeps a sliding_window it does not use unless told to
    types = cfg.get("layer_types")
    if window is None:  # a "sliding" layer without a window attends to everything
        kinds = ("full",) * layers
    elif types is not None:
        kinds = tuple(_LAYER_TYPES[t] for t in types)
        if len(kinds) != layers:
            raise ValueError(
                f"config.json layer_types has {len(kinds)} entries for {layers} layers; "
                "give one per layer"
            )
    elif family in ("qwen2", "qwen3"):
        first = int(cfg.get("max_window_layers", 28))
        kinds = tuple("sliding" if i >= first else "full" for i in range(layers))
    elif family == "gemma2":
        kinds = tuple("sliding" if (i + 1) % 2 else "full" for i in range(layers))
    elif family == "gemma3_text":
        pattern = int(cfg["sliding_window_pattern"])
        kinds = tuple("sliding" if (i + 1) % pattern else "full" for i in range(layers))
    else:  # llama, mistral: one window for every layer
        kinds = ("sliding",) * layers
    if "sliding" not in kinds:
        window = None
    return (None if window is None else int(window)), kinds


def _rope(cfg: Mapping, family: str):
    """``((theta, scaling), local)``: the RoPE of the full-attention layers and, for Gemma 3,
    ``(theta, scaling)`` of the sliding ones (else None)."""
    params = cfg.get("rope_parameters")
    nested = isinstance(params, Mapping) and "full_attention" in params
    if nested:
        full = dict(params["full_attention"] or {})
        local = dict(params.get("sliding_attention") or {})
    else:
        full = dict(params or {})
        if cfg.get("rope_scaling"):
            full.update(cfg["rope_scaling"])
        local = {}
    full.setdefault("rope_theta", cfg["rope_theta"])
    where = "rope_parameters.full_attention" if nested else "rope_parameters / rope_scaling"
    glob = (float(full["rope_theta"]), _scaling(full, where))
    if family != "gemma3_text":
        return glob, None
    local.setdefault("rope_theta", cfg["rope_local_base_freq"])
    return glob, (float(local["rope_theta"]), _scaling(local, "rope_parameters.sliding_attention"))


def _scaling(rope: Mapping, where: str) -> RopeScaling | None:
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(
            f"config.json RoPE scaling type {kind!r} ({where}) is unsupported; specjax "
            f"implements {', '.join(ROPE_TYPES)}"
        )
    if kind == "default":
        return None
    if kind == "linear":
        return RopeScaling(factor=float(rope["factor"]), kind="linear")
    return RopeScaling(
        factor=float(rope["factor"]),
        low_freq_factor=float(rope["low_freq_factor"]),
        high_freq_factor=float(rope["high_freq_factor"]),
        original_max_position=int(rope["original_max_position_embeddings"]),
    )


def config_to_hf(config: ModelConfig) -> dict:
    """The ``config.json`` dict transformers >= 5 would write for ``config`` (inverse of
    :func:`config_from_hf`).

    Raises:
      ValueError: the switches are no combination a family of :data:`FAMILIES` has.
    """
    c = config
    if c.family not in FAMILIES:
        raise ValueError(f"family {c.family!r} is not one of {FAMILIES}")
    gemma = c.family in GEMMA
    cfg = {
        "architectures": [ARCHITECTURES[c.family]],
        "model_type": c.family,
        "vocab_size": c.vocab_size,
        "hidden_size": c.dim,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "intermediate_size": c.ffn_dim,
        "head_dim": c.head_dim,
        "rms_norm_eps": c.norm_eps,
        "max_position_embeddings": c.max_seq_len,
        "tie_word_embeddings": c.tie_embeddings,
        "hidden_activation" if gemma else "hidden_act": {"silu": "silu"}.get(
            c.activation, "gelu_pytorch_tanh"
        ),
        "attention_bias": c.out_bias,
        "rope_parameters": _rope_to_hf(c.rope_theta, c.rope_scaling),
        "torch_dtype": c.param_dtype,
    }
    if c.family != "llama":
        cfg["sliding_window"] = c.sliding_window
    if c.family in ("qwen2", "qwen3") or gemma:
        names = {"full": "full_attention", "sliding": "sliding_attention"}
        cfg["layer_types"] = [names[k] for k in c.layer_types]
    if c.family in ("qwen2", "qwen3"):
        cfg["use_sliding_window"] = c.sliding_window is not None
    if gemma:
        cfg["query_pre_attn_scalar"] = c.query_pre_attn_scalar
        cfg["attn_logit_softcapping"] = c.attn_softcap
        cfg["final_logit_softcapping"] = c.final_softcap
    if c.family == "gemma3_text":
        cfg["rope_parameters"] = {
            "full_attention": cfg["rope_parameters"],
            "sliding_attention": _rope_to_hf(
                c.local_rope_theta or c.rope_theta, c.local_rope_scaling
            ),
        }
    back = config_from_hf(cfg, c.name)
    if back != dataclasses.replace(c, dtype=back.dtype, param_dtype=back.param_dtype):
        raise ValueError(
            f"{c.name}: its switches are no {c.family} model's; a Hugging Face config.json "
            "cannot describe it"
        )
    return cfg


def _rope_to_hf(theta: float, scaling: RopeScaling | None) -> dict:
    if scaling is None:
        return {"rope_type": "default", "rope_theta": theta}
    if scaling.kind == "linear":
        return {"rope_type": "linear", "rope_theta": theta, "factor": scaling.factor}
    return {
        "rope_type": "llama3",
        "rope_theta": theta,
        "factor": scaling.factor,
        "low_freq_factor": scaling.low_freq_factor,
        "high_freq_factor": scaling.high_freq_factor,
        "original_max_position_embeddings": scaling.original_max_position,
    }
