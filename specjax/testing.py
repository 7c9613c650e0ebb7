"""Tiny models for tests, demos and ``configs/tiny_random.py`` (``target = "random:<seed>"``)."""

from __future__ import annotations

from flax import nnx

from specjax.models import Llama, LlamaConfig


def tiny_config(vocab_size: int = 256, num_layers: int = 2, **overrides) -> LlamaConfig:
    """A small Llama shape: D = 64, 8 query heads over 4 KV heads, F = 128, S = 1024."""
    fields = dict(
        vocab_size=vocab_size,
        dim=64,
        num_layers=num_layers,
        num_heads=8,
        num_kv_heads=4,
        ffn_dim=128,
        max_seq_len=1024,
        name="tiny",
    )
    return LlamaConfig(**{**fields, **overrides})


def random_model(seed: int, num_layers: int = 2, **overrides) -> Llama:
    """A tiny random byte-level (V = 256) Llama of :func:`tiny_config`, seeded by ``seed``."""
    config = tiny_config(num_layers=num_layers, **{"name": f"random-{seed}", **overrides})
    return Llama(config, rngs=nnx.Rngs(seed))
