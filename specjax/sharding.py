"""Device meshes, logical-axis rules, and placing parameters, caches and decode state on them.

Parameters carry logical axis names (``nnx.Param(..., logical_axes=("embed", "heads",
"head_dim"))``); KV caches and the decode state have fixed logical layouts. One small rules table
maps logical names to mesh axes: tensor parallelism over ``model`` (column-parallel Q/K/V and
gate/up projections, row-parallel output and down projections, a vocab-parallel embedding and
head), batch over ``data``. Everything else is replicated.

Meshes use ``AxisType.Auto`` axes (GSPMD propagation), built from ``jax.devices()`` — in a
multi-process run (``jax.distributed``) that is the global device list, so the same code builds
the same global mesh in every process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from specjax.typing import Array

RULES: tuple[tuple[str, str | None], ...] = (
    ("batch", "data"),
    ("vocab", "model"),
    ("heads", "model"),
    ("kv_heads", "model"),
    ("mlp", "model"),
    ("embed", None),
    ("head_dim", None),
    ("cache_seq", None),
    ("layers", None),
)
"""Logical axis -> mesh axis (None: replicated)."""

CACHE_AXES = ("layers", "batch", "cache_seq", "kv_heads", "head_dim")
"""Logical layout of ``KVCache.k`` / ``KVCache.v`` ``[N, B, S, G, E]``."""


def parse_mesh_shape(text: str | Sequence[int]) -> tuple[int, ...]:
    """``"2,4"`` or ``(2, 4)`` -> ``(2, 4)``."""
    if isinstance(text, str):
        try:
            shape = tuple(int(x) for x in text.replace("x", ",").split(",") if x.strip())
        except ValueError:
            raise ValueError(f"mesh_shape {text!r} is not a list of integers like '2,4'") from None
    else:
        shape = tuple(int(x) for x in text)
    if not shape or min(shape) < 1:
        raise ValueError(f"mesh_shape must be positive integers like '2,4', got {text!r}")
    return shape


def make_mesh(
    shape: str | Sequence[int],
    axis_names: Sequence[str] = ("data", "model"),
    devices: Sequence[jax.Device] | None = None,
) -> Mesh:
    """A mesh of ``shape`` over ``devices`` (default: every device of every process).

    Raises:
      ValueError: the shape's device count differs from the devices available, or the axis
        names do not match the shape.
    """
    shape = parse_mesh_shape(shape)
    devices = list(jax.devices() if devices is None else devices)
    if len(axis_names) != len(shape):
        raise ValueError(f"mesh_shape {shape} needs {len(shape)} axis names, got {axis_names}")
    if math.prod(shape) != len(devices):
        raise ValueError(
            f"mesh_shape {'x'.join(map(str, shape))} needs {math.prod(shape)} devices but "
            f"{len(devices)} are available; make the product of mesh_shape {len(devices)}"
        )
    axis_types = (jax.sharding.AxisType.Auto,) * len(shape)
    return Mesh(np.asarray(devices).reshape(shape), tuple(axis_names), axis_types=axis_types)


def spec(logical_axes: Sequence[str | None] | None, rules=RULES) -> P:
    """The PartitionSpec of an array with these logical axes (None or unknown: replicated)."""
    if logical_axes is None:
        return P()
    table = dict(rules)
    return P(*(table.get(a) if a is not None else None for a in logical_axes))


def axis_size(mesh: Mesh, name: str) -> int:
    """Devices along mesh axis ``name`` (1 if the mesh has no such axis)."""
    return mesh.shape[name] if name in mesh.shape else 1


def kv_heads_split(num_kv_heads: int, mesh: Mesh) -> bool:
    """Whether G KV heads are split over the mesh's ``model`` axis; when the axis does not
    divide them (Gemma 3 1B has one) they are replicated on it, as tensor-parallel engines do,
    and each device computes the KV heads its query heads read."""
    return num_kv_heads % axis_size(mesh, "model") == 0


def model_rules(config, mesh: Mesh, rules=RULES):
    """``rules`` for a model of ``config`` on ``mesh``: :data:`RULES`, with ``kv_heads``
    replicated where the model axis does not divide them (:func:`kv_heads_split`)."""
    if kv_heads_split(config.num_kv_heads, mesh):
        return rules
    return tuple((name, None if name == "kv_heads" else axis) for name, axis in rules)


def check_model(config, mesh: Mesh, role: str = "target") -> None:
    """Raises one clear error if the model cannot be split over the mesh's ``model`` axis (its
    KV heads need not be: :func:`kv_heads_split`)."""
    m = axis_size(mesh, "model")
    for what, value in (
        ("num_heads", config.num_heads),
        ("vocab_size", config.vocab_size),
        ("ffn_dim", config.ffn_dim),
    ):
        if value % m:
            raise ValueError(
                f"{role} {what} {value} is not divisible by the mesh's model axis {m}; "
                f"choose a model axis that divides {value}"
            )


def check_batch(batch: int, mesh: Mesh) -> None:
    """Raises one clear error if the batch cannot be split over the ``data`` axis."""
    d = axis_size(mesh, "data")
    if batch % d:
        raise ValueError(
            f"batch size {batch} is not divisible by the mesh's data axis {d}; "
            f"use a batch that is a multiple of {d}"
        )


def put(x, sharding: jax.sharding.Sharding) -> Array:
    """Places a host (or single-device) array onto ``sharding`` shard by shard.

    Each process builds only its addressable shards from ``x``; no device ever holds more than
    its shard. Works in multi-process runs where ``x`` is the same full array in every process.
    """
    if isinstance(x, jax.Array) and x.sharding == sharding:
        return x
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def param_shardings(module: nnx.Module, mesh: Mesh, replicated: bool = False, rules=RULES):
    """An ``nnx.State`` of NamedShardings for ``module``'s variables, from their logical axes
    (:func:`model_rules` of its config)."""
    state = nnx.state(module)
    config = getattr(module, "config", None)
    if config is not None and hasattr(config, "num_kv_heads"):
        rules = model_rules(config, mesh, rules)

    def one(variable):
        axes = None if replicated else variable.get_metadata().get("logical_axes")
        return NamedSharding(mesh, spec(axes, rules))

    return jax.tree.map(one, state, is_leaf=lambda v: isinstance(v, nnx.Variable))


def shard_module(module: nnx.Module, mesh: Mesh, replicated: bool = False) -> nnx.Module:
    """Places ``module``'s variables on ``mesh`` in place (tensor-parallel unless replicated);
    returns the module. Each device receives only its shard."""
    shardings = nnx.to_pure_dict(param_shardings(module, mesh, replicated))
    values = nnx.to_pure_dict(nnx.state(module))
    placed = jax.tree.map(put, values, shardings)
    state = nnx.state(module)
    nnx.replace_by_pure_dict(state, placed)
    nnx.update(module, state)
    return module


def cache_spec(tensor_parallel: bool = True) -> P:
    """PartitionSpec of a KV cache's ``k``/``v``: batch over data, KV heads over model (or
    replicated on it: ``tensor_parallel`` False, e.g. where :func:`kv_heads_split` is not)."""
    axes = CACHE_AXES if tensor_parallel else (*CACHE_AXES[:3], None, None)
    return spec(axes)


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """Rows over ``data``, everything else replicated, for an array of rank ``ndim``."""
    return NamedSharding(mesh, P("data", *([None] * (ndim - 1))))


def shard_shapes(x: Array) -> list[tuple[int, ...]]:
    """Shapes of the addressable shards of ``x`` (what each local device really holds)."""
    return [tuple(s.data.shape) for s in x.addressable_shards]


def is_split(tree) -> bool:
    """Whether any array of ``tree`` is split over devices (tensor-parallel weights), rather
    than replicated or on one device."""
    return any(not x.sharding.is_fully_replicated for x in jax.tree.leaves(tree))
