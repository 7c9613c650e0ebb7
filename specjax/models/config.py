"""``ModelConfig``: the one configuration record of every decoder family specjax runs (Llama,
Mistral, Qwen2/2.5, Qwen3, Gemma 2, Gemma 3), with presets.

The families share one block (RMSNorm, RoPE, grouped-query attention, a gated MLP); what sets
them apart is a handful of switches, each a field here with Llama's behaviour as its default
(``docs/models.md`` has the table of which family sets which).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}

ROPE_KINDS = ("llama3", "linear")
"""RoPE frequency scalings specjax implements (:class:`RopeScaling`)."""

LAYER_KINDS = ("full", "sliding")
"""Attention kinds of a layer: over the whole prefix, or over a sliding window of it."""

ACTIVATIONS = ("silu", "gelu_tanh")
"""Gates of the MLP: SwiGLU (Llama, Mistral, Qwen) or GeGLU with tanh-approximated GELU
(Gemma)."""

WEIGHT_QUANTS = ("int8", "fp8")
"""Weight-only quantizations of :attr:`ModelConfig.weight_quant` (:mod:`specjax.models.quant`):
symmetric, one scale per output channel; ``fp8`` is ``float8_e4m3fn``, for GPUs with fp8
(Hopper and later)."""


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """A RoPE frequency scaling (long-context extension).

    Attributes:
      factor: how much the (low) frequencies are slowed down.
      low_freq_factor: ``llama3``: wavelengths above ``original_max_position / low_freq_factor``
        are scaled.
      high_freq_factor: ``llama3``: wavelengths below ``original_max_position /
        high_freq_factor`` are kept.
      original_max_position: ``llama3``: the context length the model was pre-trained with.
      kind: ``"llama3"`` (Llama 3.1's smooth scaling of the low frequencies) or ``"linear"``
        (every frequency divided by ``factor``: positions interpolated, as Gemma 3's global
        layers).
    """

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192
    kind: str = "llama3"

    def __post_init__(self):
        if self.kind not in ROPE_KINDS:
            raise ValueError(f"RopeScaling kind {self.kind!r} is not one of {ROPE_KINDS}")
        if self.factor <= 0 or self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                "RopeScaling needs factor > 0 and high_freq_factor > low_freq_factor, got "
                f"factor={self.factor}, low={self.low_freq_factor}, high={self.high_freq_factor}"
            )


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a decoder (letters of :mod:`specjax.typing`).

    Attributes:
      vocab_size: V.
      dim: D, the model width.
      num_layers: number of transformer blocks.
      num_heads: H, query heads.
      num_kv_heads: G, key/value heads (grouped-query attention; H % G == 0).
      head_dim: E (default D // H).
      ffn_dim: F, the gated MLP's hidden width.
      norm_eps: RMSNorm epsilon.
      rope_theta: RoPE base frequency (of every layer, or of the full-attention layers when
        ``local_rope_theta`` is set).
      rope_scaling: optional frequency scaling (of the same layers as ``rope_theta``).
      max_seq_len: longest sequence the model supports (default KV-cache capacity).
      tie_embeddings: output head shares the embedding matrix.
      dtype: activation / compute dtype name ("float32", "bfloat16" or "float16").
      param_dtype: parameter dtype name.
      name: a label for logs and checkpoints.
      family: the Hugging Face ``model_type`` this config came from (``llama``, ``mistral``,
        ``qwen2``, ``qwen3``, ``gemma2``, ``gemma3_text``); a label: the switches below say
        what the model computes.
      qkv_bias: biases on the q, k and v projections (Qwen2).
      out_bias: a bias on the output projection (Llama's ``attention_bias`` sets both).
      qk_norm: an RMSNorm over each head's q and k before RoPE (Qwen3, Gemma 3).
      norm_plus_one: RMSNorms scale by ``1 + w`` instead of ``w`` (Gemma).
      post_norms: a norm after attention and after the MLP too, before each residual add
        (Gemma's four norms per block).
      embed_scale: embeddings are multiplied by ``sqrt(D)`` (Gemma).
      activation: the MLP's gate, one of :data:`ACTIVATIONS`.
      query_pre_attn_scalar: attention scores are scaled by its ``-1/2`` power instead of
        ``head_dim ** -0.5`` (Gemma).
      attn_softcap: attention scores become ``c * tanh(score / c)`` (Gemma 2).
      final_softcap: logits become ``c * tanh(logit / c)`` (Gemma 2).
      sliding_window: W, the positions a sliding layer's token sees: itself and the ``W - 1``
        before it.
      layer_types: one of :data:`LAYER_KINDS` per layer; empty: every layer ``"sliding"`` when
        ``sliding_window`` is set (Mistral), else ``"full"``.
      local_rope_theta: the sliding layers' own RoPE base (Gemma 3), or None: theirs is
        ``rope_theta``.
      local_rope_scaling: the sliding layers' own scaling, with ``local_rope_theta``.
      fused_projections: each attention holds one ``wqkv [D, G, R + 2, E]`` (per KV group its
        R = H / G query heads, then its key and value head) and each MLP one ``w_gate_up [D, 2,
        F]``, so q/k/v and gate/up are one GEMM each (:func:`specjax.models.fuse_projections`
        builds it from a loaded model); same logits within rounding.
      weight_quant: None, or one of :data:`WEIGHT_QUANTS`: the projection weights (q/k/v/o,
        gate/up/down, an untied head) are stored quantized with one fp32 scale per output
        channel (``<name>_scale``) and converted to the compute dtype inside each GEMM
        (:func:`specjax.models.quantize_weights`); this model is then the target.
    """

    vocab_size: int
    dim: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    ffn_dim: int
    head_dim: int | None = None
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    max_seq_len: int = 2048
    tie_embeddings: bool = False
    dtype: str = "float32"
    param_dtype: str = "float32"
    name: str = "llama"
    family: str = "llama"
    qkv_bias: bool = False
    out_bias: bool = False
    qk_norm: bool = False
    norm_plus_one: bool = False
    post_norms: bool = False
    embed_scale: bool = False
    activation: str = "silu"
    query_pre_attn_scalar: float | None = None
    attn_softcap: float | None = None
    final_softcap: float | None = None
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    local_rope_theta: float | None = None
    local_rope_scaling: RopeScaling | None = None
    fused_projections: bool = False
    weight_quant: str | None = None

    def __post_init__(self):
        def fail(msg):
            raise ValueError(f"ModelConfig({self.name}): {msg}")

        for field in ("vocab_size", "dim", "num_layers", "num_heads", "num_kv_heads", "ffn_dim"):
            if getattr(self, field) < 1:
                fail(f"{field} must be >= 1, got {getattr(self, field)}")
        if self.num_heads % self.num_kv_heads:
            fail(
                f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads}) "
                "for grouped-query attention"
            )
        if self.head_dim is None:
            if self.dim % self.num_heads:
                fail(f"num_heads ({self.num_heads}) must divide dim ({self.dim}), or set head_dim")
            object.__setattr__(self, "head_dim", self.dim // self.num_heads)
        if self.head_dim % 2:
            fail(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.dtype not in DTYPES or self.param_dtype not in DTYPES:
            fail(f"dtype and param_dtype must be one of {sorted(DTYPES)}")
        if self.max_seq_len < 1 or self.norm_eps <= 0 or self.rope_theta <= 0:
            fail("max_seq_len, norm_eps and rope_theta must be positive")
        if self.activation not in ACTIVATIONS:
            fail(f"activation {self.activation!r} is not one of {ACTIVATIONS}")
        for field in ("query_pre_attn_scalar", "attn_softcap", "final_softcap"):
            value = getattr(self, field)
            if value is not None and not value > 0:
                fail(f"{field} must be positive or None, got {value}")
        if self.sliding_window is not None and self.sliding_window < 1:
            fail(f"sliding_window must be >= 1 or None, got {self.sliding_window}")
        kinds = tuple(self.layer_types)
        if not kinds:
            kinds = ("sliding" if self.sliding_window else "full",) * self.num_layers
        if len(kinds) != self.num_layers or not set(kinds) <= set(LAYER_KINDS):
            fail(
                f"layer_types needs one of {LAYER_KINDS} per layer ({self.num_layers}), got {kinds}"
            )
        if "sliding" in kinds and self.sliding_window is None:
            fail("layer_types has sliding layers but sliding_window is None")
        object.__setattr__(self, "layer_types", kinds)
        if "sliding" not in kinds:  # a window no layer uses (a self-draft of full layers)
            object.__setattr__(self, "sliding_window", None)
        if self.local_rope_scaling is not None and self.local_rope_theta is None:
            fail("local_rope_scaling needs local_rope_theta")
        if self.local_rope_theta is not None and not self.local_rope_theta > 0:
            fail(f"local_rope_theta must be positive, got {self.local_rope_theta}")
        if not isinstance(self.fused_projections, bool):
            fail(f"fused_projections must be True or False, got {self.fused_projections!r}")
        if self.weight_quant not in (None, *WEIGHT_QUANTS):
            fail(f"weight_quant {self.weight_quant!r} is not None or one of {WEIGHT_QUANTS}")

    @property
    def compute_dtype(self):
        """The jnp dtype of activations."""
        return DTYPES[self.dtype]

    @property
    def weight_dtype(self):
        """The jnp dtype of parameters."""
        return DTYPES[self.param_dtype]

    @property
    def transformed(self) -> bool:
        """Whether the weights are in a load-time form (fused or quantized) that has no
        Hugging Face layout or checkpoint of its own."""
        return self.fused_projections or self.weight_quant is not None

    def window(self, layer: int) -> int | None:
        """W of layer ``layer``, or None for a full-attention layer."""
        return self.sliding_window if self.layer_types[layer] == "sliding" else None

    def rope(self, layer: int) -> tuple[float, RopeScaling | None]:
        """``(theta, scaling)`` of layer ``layer``'s rotary embedding."""
        if self.local_rope_theta is not None and self.layer_types[layer] == "sliding":
            return self.local_rope_theta, self.local_rope_scaling
        return self.rope_theta, self.rope_scaling

    @property
    def num_params(self) -> int:
        """Number of parameters (embedding counted once when tied)."""
        d, f, e = self.dim, self.ffn_dim, self.head_dim
        attn = d * e * (self.num_heads * 2 + self.num_kv_heads * 2)
        attn += (self.num_heads + 2 * self.num_kv_heads) * e if self.qkv_bias else 0
        attn += d if self.out_bias else 0
        attn += 2 * e if self.qk_norm else 0
        block = attn + 3 * d * f + (4 if self.post_norms else 2) * d
        head = 0 if self.tie_embeddings else d * self.vocab_size
        return self.vocab_size * d + self.num_layers * block + d + head


def tiny(**overrides) -> ModelConfig:
    """A tiny model for tests (V 64, D 32, 2 layers, 4 query / 2 KV heads)."""
    base = dict(
        vocab_size=64,
        dim=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        ffn_dim=64,
        max_seq_len=128,
        name="tiny",
    )
    return ModelConfig(**{**base, **overrides})


def smollm2_135m(**overrides) -> ModelConfig:
    """SmolLM2-135M(-Instruct): 30 layers, D 576, 9 query / 3 KV heads, V 49152, tied."""
    base = dict(
        vocab_size=49152,
        dim=576,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        ffn_dim=1536,
        rope_theta=100000.0,
        norm_eps=1e-5,
        max_seq_len=8192,
        tie_embeddings=True,
        name="smollm2-135m",
    )
    return ModelConfig(**{**base, **overrides})


def llama3_8b(**overrides) -> ModelConfig:
    """Meta-Llama-3-8B: 32 layers, D 4096, 32 / 8 heads, F 14336, V 128256, context 8192."""
    base = dict(
        vocab_size=128256,
        dim=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        ffn_dim=14336,
        rope_theta=500000.0,
        max_seq_len=8192,
        dtype="bfloat16",
        param_dtype="bfloat16",
        name="llama3-8b",
    )
    return ModelConfig(**{**base, **overrides})


def llama3_70b(**overrides) -> ModelConfig:
    """Meta-Llama-3-70B: 80 layers, D 8192, 64 / 8 heads, F 28672, V 128256, context 8192."""
    base = dict(
        vocab_size=128256,
        dim=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        ffn_dim=28672,
        rope_theta=500000.0,
        max_seq_len=8192,
        dtype="bfloat16",
        param_dtype="bfloat16",
        name="llama3-70b",
    )
    return ModelConfig(**{**base, **overrides})


def llama31(preset, **overrides) -> ModelConfig:
    """The Llama-3.1 version of a Llama-3 preset: RoPE scaling and a 131072-token context."""
    cfg = preset(**{"rope_scaling": RopeScaling(), "max_seq_len": 131072, **overrides})
    return dataclasses.replace(cfg, name=cfg.name.replace("llama3", "llama3.1"))


PRESETS = {
    "tiny": tiny,
    "smollm2-135m": smollm2_135m,
    "llama3-8b": llama3_8b,
    "llama3-70b": llama3_70b,
    "llama3.1-8b": lambda **kw: llama31(llama3_8b, **kw),
    "llama3.1-70b": lambda **kw: llama31(llama3_70b, **kw),
}


def preset(name: str, **overrides) -> ModelConfig:
    """A named preset; unknown names get one clear error listing the known ones."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name](**overrides)
