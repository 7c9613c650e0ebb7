"""Tiny models for tests, demos and ``configs/tiny_random.py`` (``target = "random:<seed>"``)."""

from __future__ import annotations

from flax import nnx

from specjax.models import Llama, config


def random_model(seed: int, num_layers: int = 2, **overrides) -> Llama:
    """A tiny random byte-level Llama, seeded by ``seed``: the ``tiny`` preset widened to
    V = 256, D = 64, 8 query over 4 KV heads, F = 128 and S = 1024."""
    shape = dict(vocab_size=256, dim=64, num_heads=8, num_kv_heads=4, ffn_dim=128)
    fields = dict(**shape, num_layers=num_layers, max_seq_len=1024, name=f"random-{seed}")
    return Llama(config.tiny(**{**fields, **overrides}), rngs=nnx.Rngs(seed))
