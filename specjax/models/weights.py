"""Load-time forms of a loaded :class:`~specjax.models.decoder.Decoder`'s weights: fused
projections (one GEMM for q/k/v, one for gate/up) and weight-only quantization (int8 or fp8,
one scale per output channel).

Both are pure functions of a model: they return a new :class:`Decoder` whose config carries the
switch (:attr:`~specjax.models.config.ModelConfig.fused_projections`,
:attr:`~specjax.models.config.ModelConfig.weight_quant`); the weights they leave alone (the
embedding, norms, biases other than q/k/v's, ``wo`` and ``w_down`` when only fusing) are shared,
not copied. The concatenation and the quantization run once here, never in a forward. A model
on a mesh stays on it, each new weight placed by its logical axes.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import jax
from flax import nnx
from jax.sharding import NamedSharding

from specjax import sharding
from specjax.models import quant
from specjax.models.config import WEIGHT_QUANTS
from specjax.models.decoder import Decoder, fuse_gate_up, fuse_qkv
from specjax.models.pure import PureModel

CPU_NOTE = (
    "weight_quant={kind} on the CPU decodes slower than float32: XLA:CPU converts each weight "
    "to the compute dtype before its dot (a SmolLM2-shaped int8 step took 2-4x the "
    "float32 one, docs/models.md); quantized weights are for GPUs, where the convert is fused "
    "into the GEMM. Leave weight_quant unset on the CPU"
)
"""The warning :func:`quantize_weights` gives for a model on the CPU."""


def _either(transform):
    """``transform`` of a :class:`Decoder` also taking a :class:`PureModel` (and returning one),
    as every public entry point takes either."""

    @functools.wraps(transform)
    def wrapper(model, *args, **kwargs):
        if isinstance(model, PureModel):
            return PureModel.of(transform(model.module, *args, **kwargs))
        return transform(model, *args, **kwargs)

    return wrapper


@_either
def fuse_projections(model: Decoder) -> Decoder:
    """``model`` with each attention's ``wq``/``wk``/``wv`` (and their biases) fused into one
    ``wqkv [D, G, R + 2, E]`` and each MLP's ``w_gate``/``w_up`` into one ``w_gate_up [D, 2, F]``
    (:func:`~specjax.models.decoder.fuse_qkv`, :func:`~specjax.models.decoder.fuse_gate_up`):
    one GEMM each instead of three and two. A quantized model's scales are fused alike (a
    per-channel scale does not mix channels, so fusing and quantizing commute). Logits equal
    the unfused model's up to the GEMMs' rounding. A fused model is returned as it is."""
    if model.config.fused_projections:
        return model
    config = dataclasses.replace(model.config, fused_projections=True)
    quantized = model.config.weight_quant is not None

    def fuse(params: dict) -> dict:
        suffixes = ("", "_scale") if quantized else ("",)  # a weight and its scales alike
        for layer in params["layers"].values():
            attn, mlp = layer["attn"], layer["mlp"]
            for suffix in suffixes:
                parts = (attn.pop(f"{name}{suffix}") for name in ("wq", "wk", "wv"))
                attn[f"wqkv{suffix}"] = fuse_qkv(*parts)
                parts = (mlp.pop(f"{name}{suffix}") for name in ("w_gate", "w_up"))
                mlp[f"w_gate_up{suffix}"] = fuse_gate_up(*parts)
            if model.config.qkv_bias:
                attn["bqkv"] = fuse_qkv(attn.pop("bq"), attn.pop("bk"), attn.pop("bv"))
        return params

    return _rebuild(model, config, fuse)


def projection_weights(config) -> list[tuple[tuple, int]]:
    """``(path, contracted axes)`` of every weight :func:`quantize_weights` quantizes: the
    projections of each block and an untied output head (not the embedding, norms or biases)."""
    attn = ["wqkv"] if config.fused_projections else ["wq", "wk", "wv"]
    mlp = ["w_gate_up"] if config.fused_projections else ["w_gate", "w_up"]
    out = []
    for i in range(config.num_layers):
        out += [(("layers", i, "attn", name), 1) for name in attn]
        out += [(("layers", i, "attn", "wo"), 2)]
        out += [(("layers", i, "mlp", name), 1) for name in (*mlp, "w_down")]
    if not config.tie_embeddings:
        out.append((("lm_head",), 1))
    return out


@_either
def quantize_weights(model: Decoder, kind: str = "int8") -> Decoder:
    """``model`` with its projection weights (q/k/v/o, gate/up/down, fused or not, and an
    untied output head) quantized per output channel (:func:`specjax.models.quant.quantize`);
    the embedding (a tied head with it), norms and biases stay as they are.

    The result is a model of its own: its forward (:func:`specjax.models.quant.qdot`) defines
    the target that speculative decoding is exact against. On the CPU it is slower than the
    float model, and says so in a warning.

    Args:
      model: a float model (fused or not).
      kind: ``"int8"`` or ``"fp8"`` (``float8_e4m3fn``: for GPUs, untested on one here).

    Raises:
      ValueError: an unknown ``kind``, or a model already quantized another way (quantizing
        twice compounds the rounding: quantize the float model). A model quantized the same way
        is returned as it is.
    """
    if kind not in WEIGHT_QUANTS:
        raise ValueError(f"weight_quant {kind!r} is not one of {WEIGHT_QUANTS}")
    have = model.config.weight_quant
    if have == kind:
        return model
    if have is not None:
        raise ValueError(
            f"model {model.config.name} is already quantized ({have}); quantize its float "
            f"weights to {kind} instead (load it again without weight_quant)"
        )
    config = dataclasses.replace(model.config, weight_quant=kind)
    if _platform(model) == "cpu":  # allowed (tests, checks), but never what a user wants
        warnings.warn(CPU_NOTE.format(kind=kind), stacklevel=3)

    def quantize(params: dict) -> dict:
        for path, contracted in projection_weights(model.config):
            node = params
            for key in path[:-1]:
                node = node[key]
            name = path[-1]
            node[name], node[f"{name}_scale"] = quant.quantize(node[name], kind, contracted)
        return params

    return _rebuild(model, config, quantize)


def transform(model: Decoder, fuse: bool = False, weight_quant: str | None = None) -> Decoder:
    """``model`` fused (``fuse``) and quantized (``weight_quant``, None or ``""``: not), as a
    loader applies the two switches; the checks run before any work."""
    if weight_quant and weight_quant not in WEIGHT_QUANTS:
        raise ValueError(f"weight_quant {weight_quant!r} is not one of {WEIGHT_QUANTS}")
    if fuse:
        model = fuse_projections(model)
    return quantize_weights(model, weight_quant) if weight_quant else model


def _platform(model: Decoder) -> str:
    leaf = jax.tree.leaves(nnx.state(model))[0]
    return next(iter(leaf.devices())).platform


def _rebuild(model: Decoder, config, change) -> Decoder:
    """A :class:`Decoder` of ``config`` holding ``change(params of model)`` (a dict changed in
    place; the leaves it keeps are shared). On a mesh, the new weights are placed by their
    logical axes, tensor-parallel or replicated as ``model`` was."""
    state = nnx.state(model)
    params = change(nnx.to_pure_dict(state))
    abstract = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
    graphdef, new_state = nnx.split(abstract)
    want = jax.tree.structure(nnx.to_pure_dict(new_state))
    if jax.tree.structure(params) != want:  # a bug here, not the caller's
        raise AssertionError(f"rebuilt params {jax.tree.structure(params)} are not {want}")
    leaf = jax.tree.leaves(state)[0]
    if isinstance(leaf.sharding, NamedSharding) and leaf.sharding.mesh.size > 1:
        mesh = leaf.sharding.mesh
        replicated = not sharding.is_split(state)
        where = nnx.to_pure_dict(sharding.param_shardings(abstract, mesh, replicated))
        params = jax.tree.map(jax.device_put, params, where)
    nnx.replace_by_pure_dict(new_state, params)
    return nnx.merge(graphdef, new_state)
