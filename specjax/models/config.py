"""``LlamaConfig``: the one configuration record of the Llama model family, with presets."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Llama-3.1-style RoPE frequency scaling (long-context extension).

    Attributes:
      factor: how much the low frequencies are slowed down.
      low_freq_factor: wavelengths above ``original_max_position / low_freq_factor`` are scaled.
      high_freq_factor: wavelengths below ``original_max_position / high_freq_factor`` are kept.
      original_max_position: the context length the model was pre-trained with.
    """

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192

    def __post_init__(self):
        if self.factor <= 0 or self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                "RopeScaling needs factor > 0 and high_freq_factor > low_freq_factor, got "
                f"factor={self.factor}, low={self.low_freq_factor}, high={self.high_freq_factor}"
            )


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Shape and numerics of a Llama-family decoder (letters of :mod:`specjax.typing`).

    Attributes:
      vocab_size: V.
      dim: D, the model width.
      num_layers: number of transformer blocks.
      num_heads: H, query heads.
      num_kv_heads: G, key/value heads (grouped-query attention; H % G == 0).
      head_dim: E (default D // H).
      ffn_dim: F, the SwiGLU hidden width.
      norm_eps: RMSNorm epsilon.
      rope_theta: RoPE base frequency.
      rope_scaling: optional Llama-3.1 frequency scaling.
      max_seq_len: longest sequence the model supports (default KV-cache capacity).
      tie_embeddings: output head shares the embedding matrix.
      dtype: activation / compute dtype name ("float32" or "bfloat16").
      param_dtype: parameter dtype name.
      name: a label for logs and checkpoints.
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

    def __post_init__(self):
        def fail(msg):
            raise ValueError(f"LlamaConfig({self.name}): {msg}")

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

    @property
    def compute_dtype(self):
        """The jnp dtype of activations."""
        return DTYPES[self.dtype]

    @property
    def weight_dtype(self):
        """The jnp dtype of parameters."""
        return DTYPES[self.param_dtype]

    @property
    def num_params(self) -> int:
        """Number of parameters (embedding counted once when tied)."""
        d, f, e = self.dim, self.ffn_dim, self.head_dim
        attn = d * e * (self.num_heads * 2 + self.num_kv_heads * 2)
        block = attn + 3 * d * f + 2 * d
        head = 0 if self.tie_embeddings else d * self.vocab_size
        return self.vocab_size * d + self.num_layers * block + d + head


def tiny(**overrides) -> LlamaConfig:
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
    return LlamaConfig(**{**base, **overrides})


def smollm2_135m(**overrides) -> LlamaConfig:
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
    return LlamaConfig(**{**base, **overrides})


def llama3_8b(**overrides) -> LlamaConfig:
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
    return LlamaConfig(**{**base, **overrides})


def llama3_70b(**overrides) -> LlamaConfig:
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
    return LlamaConfig(**{**base, **overrides})


def llama31(preset, **overrides) -> LlamaConfig:
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


def preset(name: str, **overrides) -> LlamaConfig:
    """A named preset; unknown names get one clear error listing the known ones."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name](**overrides)
