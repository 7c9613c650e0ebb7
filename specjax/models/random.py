"""Random models: the ``random:<seed>`` model source (``configs/tiny_random.py``), a tiny
byte-level Llama built from a seed, with no file behind it."""

from __future__ import annotations

from flax import nnx

from specjax.models import config
from specjax.models.decoder import Decoder

RANDOM_VOCAB = 256
"""V of :func:`random_model` (byte-level), the vocabulary of a ``random:<seed>`` source."""


def random_config(seed: int, num_layers: int = 2, **overrides) -> config.ModelConfig:
    """The config of :func:`random_model`: the ``tiny`` preset widened to V = 256, D = 64, 8
    query over 4 KV heads, F = 128 and S = 1024."""
    fields = dict(
        vocab_size=RANDOM_VOCAB,
        dim=64,
        num_heads=8,
        num_kv_heads=4,
        ffn_dim=128,
        max_seq_len=1024,
        num_layers=num_layers,
        name=f"random-{seed}",
    )
    return config.tiny(**{**fields, **overrides})


def random_model(seed: int, num_layers: int = 2, **overrides) -> Decoder:
    """A tiny random byte-level Llama, seeded by ``seed`` (:func:`random_config`)."""
    return Decoder(random_config(seed, num_layers, **overrides), rngs=nnx.Rngs(seed))
