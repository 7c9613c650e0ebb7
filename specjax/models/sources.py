"""Loading a model by its source name, optionally straight onto a device mesh.

A source is a checkpoint directory (specjax / orbax), a ``.gguf`` file, a Hugging Face directory
(``config.json`` + safetensors), ``smollm2`` (the registry package's GGUF) or ``random:<seed>`` (a
tiny random byte-level model). :func:`load_on_mesh` puts the parameters on a mesh without a full
copy on any one device: orbax restores each array directly into its sharding; Hugging Face
safetensors are read slice by slice, each process reading only what its devices hold; GGUF
weights (dequantized on the host) are placed shard by shard.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax import sharding
from specjax.models import checkpoint, weights
from specjax.models.config import WEIGHT_QUANTS
from specjax.models.decoder import Decoder
from specjax.models.fetch import fetch_smollm2
from specjax.models.gguf_loader import load_gguf
from specjax.models.pretrained import build_model, detect_format, load_pretrained
from specjax.models.safetensors_loader import read_config, read_sharded
from specjax.models.tokenizer import ByteTokenizer


def load_model(
    path: str,
    dtype: str = "",
    mesh=None,
    replicated: bool = False,
    role: str = "model",
    *,
    fuse_projections: bool = False,
    weight_quant: str | None = None,
):
    """A model and its tokenizer from a source name.

    Args:
      path: a specjax checkpoint directory, a ``.gguf`` file, a Hugging Face directory,
        ``smollm2`` (the registry package's GGUF) or ``random:<seed>`` (a tiny random
        byte-level model).
      dtype: the parameters' dtype (e.g. ``"bfloat16"``); ``""`` keeps the stored one.
      mesh: a device mesh to place the parameters on, or None for one device.
      replicated: with a mesh, replicate the parameters instead of splitting them
        (tensor parallelism over ``model``).
      role: what the model is (``"target"``, ``"draft"``), named in errors.
      fuse_projections: fuse q/k/v and gate/up into one GEMM each once loaded
        (:func:`specjax.models.fuse_projections`).
      weight_quant: ``"int8"`` or ``"fp8"`` to quantize the projection weights once loaded
        (:func:`specjax.models.quantize_weights`; the quantized model is the one decoded), or
        None / ``""``.

    Returns:
      ``(Decoder, tokenizer)``; the tokenizer is None for a checkpoint saved without one.

    Raises:
      FileNotFoundError: ``path`` names no file or directory.
      ValueError: a bad ``dtype`` or ``weight_quant`` (before anything is read).
    """
    if weight_quant and weight_quant not in WEIGHT_QUANTS:
        raise ValueError(
            f"{role} weight_quant {weight_quant!r} is not one of {WEIGHT_QUANTS} (or '': none)"
        )
    module, tokenizer = _load(os.fspath(path), dtype, mesh, replicated, role)
    return weights.transform(module, fuse_projections, weight_quant or None), tokenizer


def _load(path: str, dtype: str, mesh, replicated: bool, role: str):
    """:func:`load_model` before the load-time transforms."""
    if dtype:
        try:
            floating = jnp.issubdtype(jnp.dtype(dtype), jnp.floating)
        except TypeError:
            floating = False
        if not floating:
            raise ValueError(
                f"{role} dtype {dtype!r} is not a floating dtype; give 'float32', 'bfloat16' "
                "(or '' to keep the stored one)"
            )
    if path.startswith("random:"):
        from specjax.models.random import random_model

        seed = path.split(":", 1)[1]
        if not seed.isdigit():
            raise ValueError(f"{role} {path!r}: random:<seed> needs a non-negative integer seed")
        module = random_model(int(seed))
        if mesh is not None:
            if not replicated:
                sharding.check_model(module.config, mesh, role)
            sharding.shard_module(module, mesh, replicated)
        return module, ByteTokenizer()
    if path == "smollm2":
        path = str(fetch_smollm2())
    if not Path(path).exists():
        raise FileNotFoundError(
            f"checkpoint {path!r} not found; give a specjax checkpoint directory, a .gguf file, "
            "a Hugging Face directory, 'smollm2' or 'random:<seed>'"
        )
    if mesh is not None:
        return load_on_mesh(path, dtype or None, mesh, replicated, role)
    pre = load_pretrained(path, dtype or None)
    return pre.model, pre.tokenizer


def _abstract(config) -> Decoder:
    return nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))


def load_on_mesh(path: str | Path, dtype, mesh, replicated: bool = False, role: str = "model"):
    """``(Decoder, tokenizer)`` with every parameter on ``mesh`` (tensor-parallel by the logical
    axis rules, or replicated).

    Raises:
      ValueError: the model cannot be split over the mesh's ``model`` axis (names both numbers).
    """
    kind = detect_format(path)
    if kind == "checkpoint":
        meta = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
        config = checkpoint.config_from_json(meta)
        if not replicated:
            sharding.check_model(config, mesh, role)
        shardings = sharding.param_shardings(_abstract(config), mesh, replicated)
        pre = load_pretrained(path, dtype, sharding=shardings)
        return pre.model, pre.tokenizer
    if kind == "hf":  # each process reads only the slices its devices hold
        config = read_config(path, dtype)
        if not replicated:
            sharding.check_model(config, mesh, role)
        shardings = nnx.to_pure_dict(sharding.param_shardings(_abstract(config), mesh, replicated))
        config, placed, tokenizer = read_sharded(path, dtype, shardings)
        return build_model(config, placed), tokenizer
    config, params, tokenizer = load_gguf(path, dtype)  # dequantized whole on the host
    if not replicated:
        sharding.check_model(config, mesh, role)
    shardings = nnx.to_pure_dict(sharding.param_shardings(_abstract(config), mesh, replicated))
    cast = lambda x: np.asarray(x, config.weight_dtype)  # on the host, before placing
    placed = jax.tree.map(lambda x, s: sharding.put(cast(x), s), params, shardings)
    return build_model(config, placed), tokenizer
