"""Rotary position embeddings (rotate-half convention, as in Hugging Face), with Llama 3.1's and
linear frequency scaling."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from specjax.models.config import RopeScaling
from specjax.typing import Array


def inverse_frequencies(head_dim: int, theta: float, scaling: RopeScaling | None) -> np.ndarray:
    """``[E/2]`` float64 inverse frequencies ``theta^(-2i/E)``, scaled as ``scaling`` says."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is None:
        return inv
    if scaling.kind == "linear":
        return inv / scaling.factor
    old = scaling.original_max_position
    low_wavelen = old / scaling.low_freq_factor
    high_wavelen = old / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / scaling.factor, inv)
    smooth = (old / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, smoothed, scaled)


def apply_rope(x: Array, positions: Array, inv: np.ndarray) -> Array:
    """Rotates ``x [B, T, H or G, E]`` by the angles of ``positions [B, T]`` times the inverse
    frequencies ``inv [E/2]`` (:func:`inverse_frequencies`), computed in fp32."""
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv, jnp.float32)  # [B, T, E/2]
    cos = jnp.cos(angles)[:, :, None, :]  # [B, T, 1, E/2]
    sin = jnp.sin(angles)[:, :, None, :]
    x32 = x.astype(jnp.float32)
    x1, x2 = jnp.split(x32, 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)
