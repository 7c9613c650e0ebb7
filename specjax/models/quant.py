"""Weight-only quantization, per output channel, and the GEMM that reads it.

A weight ``w [*in, *out]`` (specjax keeps the contracted axes first) becomes ``q`` of the same
shape in int8 (or ``float8_e4m3fn``) and one fp32 ``scale [*out]`` per output channel:
``scale = max|w| / Q`` over the input axes (Q = 127 for int8, 448 for fp8, the largest finite
value), ``q = round(w / scale)``; symmetric, no zero point. :func:`qdot` then computes
``einsum(x, q.astype(dtype)) * scale``: the weight enters the dot in the compute dtype (a
convert XLA can fuse into the GEMM, so no dequantized copy of the weight is written) and the
scale multiplies the product's output channels, which is ``x @ (q * scale)`` up to rounding.
The quantized model is then the target: speculative decoding is exact against its forward.
"""

from __future__ import annotations

import jax.numpy as jnp

from specjax.typing import Array

FORMATS = {"int8": (jnp.int8, 127.0), "fp8": (jnp.float8_e4m3fn, 448.0)}
"""``weight_quant`` name -> (storage dtype, the largest value a scaled weight takes)."""


def quantize(w: Array, kind: str, contracted: int = 1) -> tuple[Array, Array]:
    """``(q, scale)`` of ``w`` whose first ``contracted`` axes are the GEMM's input axes.

    Args:
      w: the weight ``[*in, *out]`` (any float dtype; quantized from its fp32 value).
      kind: ``"int8"`` or ``"fp8"`` (:data:`FORMATS`).
      contracted: how many leading axes the GEMM contracts (2 for ``wo [H, E, D]``).

    Returns:
      ``q`` (``w``'s shape, int8 or float8_e4m3fn) and fp32 ``scale [*out]``, with
      ``|q * scale - w| <= scale / 2`` per entry for int8. An all-zero channel gets scale 1.
    """
    if kind not in FORMATS:
        raise ValueError(f"weight_quant {kind!r} is not one of {tuple(FORMATS)}")
    dtype, top = FORMATS[kind]
    w32 = jnp.asarray(w, jnp.float32)
    amax = jnp.max(jnp.abs(w32), axis=tuple(range(contracted)))
    scale = jnp.where(amax > 0, amax / top, 1.0)
    scaled = jnp.clip(w32 / scale, -top, top)  # (a rounding of w / scale may pass top)
    if kind == "int8":
        scaled = jnp.round(scaled)
    return scaled.astype(dtype), scale  # fp8: the cast rounds to nearest


def dequantize(q: Array, scale: Array) -> Array:
    """fp32 ``q * scale`` (the weight the quantized GEMM multiplies by, up to rounding)."""
    return q.astype(jnp.float32) * scale


def qdot(spec: str, x: Array, w: Array, scale: Array | None, dtype) -> Array:
    """``einsum(spec, x, w)`` in ``dtype``, the output's trailing axes scaled by ``scale`` when
    ``w`` is quantized (``scale`` None: a plain float weight)."""
    y = jnp.einsum(spec, x, w.astype(dtype))
    return y if scale is None else y * scale.astype(dtype)
