"""Tiny models for tests and demos: target/draft pairs that agree (:func:`pair`), and the
random byte-level models of ``configs/tiny_random.py`` (:func:`random_model`, defined with the
``random:<seed>`` source in :mod:`specjax.models.random`, re-exported here)."""

from __future__ import annotations

import jax
from flax import nnx

from specjax.models import Decoder, ModelConfig, config
from specjax.models.pure import PureModel
from specjax.models.random import RANDOM_VOCAB, random_model

__all__ = ["RANDOM_VOCAB", "pair", "perturbed", "random_model", "sharpened", "tiny_config"]


def tiny_config(vocab: int = 48, **kw) -> ModelConfig:
    """The ``tiny`` preset with vocabulary ``vocab`` and room for 256 positions."""
    return config.tiny(**{"vocab_size": vocab, "max_seq_len": 256, "name": "tiny-target", **kw})


def sharpened(model: Decoder, scale: float) -> Decoder:
    """Scales the output head so next-token laws are peaked and context dependent."""
    if model.config.tie_embeddings:
        model.embed[...] = model.embed[...] * scale
    else:
        model.lm_head[...] = model.lm_head[...] * scale
    return model


def perturbed(model: Decoder, sigma: float, seed: int) -> Decoder:
    """A copy of ``model`` with Gaussian noise on every weight: a draft that mostly agrees."""
    graphdef, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    noisy = [
        x + sigma * jax.random.normal(k, x.shape, x.dtype)
        for x, k in zip(leaves, keys, strict=True)
    ]
    return nnx.merge(graphdef, jax.tree.unflatten(treedef, noisy))


def pair(vocab: int = 48, sigma: float = 0.15, scale: float = 4.0, seed: int = 0, **config):
    """``(target, draft)`` PureModels: a sharpened random target and a noisy copy of it."""
    target = sharpened(Decoder(tiny_config(vocab, **config), rngs=nnx.Rngs(seed)), scale)
    draft = perturbed(target, sigma, seed + 100)
    return PureModel.of(target), PureModel.of(draft)
