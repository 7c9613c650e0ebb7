"""Orbax checkpoints of a Llama: params + config JSON + tokenizer, saved atomically, restored onto
any sharding.

Layout of a checkpoint directory::

    <path>/params/                  orbax StandardCheckpointHandler (OCDBT) tree of the params
    <path>/config.json              the ModelConfig (dataclasses.asdict)
    <path>/tokenizer/               optional, TokenizerBase.save()
    <path>/specjax_checkpoint.json  manifest, written last

Atomicity: everything is written into a hidden sibling ``.<name>.tmp-<id>`` and renamed onto
``<path>`` only when complete. An existing checkpoint is first renamed aside and deleted only
after the new one is in place, so a crash at any point leaves either the old or the new
checkpoint loadable at ``<path>`` (or, in the instant between the two renames, the old one at
``.<name>.old-<id>``, which :func:`restore`'s error points to). Single writer per path.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import uuid
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from specjax.errors import first_line
from specjax.files import write_json
from specjax.models.config import ModelConfig, RopeScaling
from specjax.models.hf_params import param_shapes
from specjax.models.tokenizer import TokenizerBase, load_tokenizer

MANIFEST = "specjax_checkpoint.json"
FORMAT = "specjax-llama-checkpoint"
VERSION = 1


def config_to_json(config: ModelConfig) -> dict:
    """A JSON-serialisable dict of a :class:`ModelConfig`."""
    return dataclasses.asdict(config)


def config_from_json(obj: dict) -> ModelConfig:
    """Inverse of :func:`config_to_json`."""
    obj = dict(obj)
    for key in ("rope_scaling", "local_rope_scaling"):
        if obj.get(key) is not None:
            obj[key] = RopeScaling(**obj[key])
    obj["layer_types"] = tuple(obj.get("layer_types", ()))
    return ModelConfig(**obj)


def to_params(params_or_model) -> dict:
    """The pure params dict of a Llama module, an ``nnx.State`` or an existing params dict."""
    if isinstance(params_or_model, nnx.Module):
        params_or_model = nnx.state(params_or_model, nnx.Param)
    if isinstance(params_or_model, nnx.State):
        return nnx.to_pure_dict(params_or_model)
    return params_or_model


def save(
    path: str | Path,
    params,
    config: ModelConfig,
    tokenizer: TokenizerBase | None = None,
) -> Path:
    """Saves params, config and tokenizer to ``path`` atomically (replacing a previous one).

    Args:
      path: the checkpoint directory.
      params: the params dict (see :mod:`specjax.models.hf_params`), an ``nnx.State``
        or a :class:`~specjax.models.decoder.Decoder`; jax or NumPy leaves, any sharding.
      config: the model's configuration.
      tokenizer: optional tokenizer saved alongside.

    Returns:
      The checkpoint path.

    Raises:
      ValueError: params that do not match ``config``, or ``path`` holds something other than a
        checkpoint; the previous checkpoint is untouched.
    """
    path = Path(path).absolute()
    if path.exists() and not is_checkpoint(path):
        raise ValueError(
            f"{path} exists and is not a specjax checkpoint; refusing to replace it. "
            "Choose a new path (or remove it yourself)"
        )
    params = to_params(params)
    _check_shapes(params, config, f"params given to save({path})")
    path.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    tmp = path.parent / f".{path.name}.tmp-{token}"
    try:
        tmp.mkdir()
        _write_params(tmp / "params", params)
        write_json(tmp / "config.json", config_to_json(config))
        if tokenizer is not None:
            tokenizer.save(tmp / "tokenizer")
        write_json(tmp / MANIFEST, {"format": FORMAT, "version": VERSION})
        _commit(tmp, path, token)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _write_params(directory: Path, params: dict) -> None:
    with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as ckptr:
        ckptr.save(directory, args=ocp.args.StandardSave(params))


def _commit(tmp: Path, path: Path, token: str) -> None:
    """Moves the finished ``tmp`` onto ``path``; an old checkpoint is deleted only afterwards
    (and put back if moving the new one in fails)."""
    old = path.parent / f".{path.name}.old-{token}" if path.exists() else None
    if old is not None:
        path.rename(old)
    try:
        tmp.rename(path)
    except BaseException:
        if old is not None and not path.exists():
            old.rename(path)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def restore(path: str | Path, sharding=None):
    """Restores a checkpoint written by :func:`save`.

    Args:
      path: the checkpoint directory.
      sharding: where the params go: None (the default device), one ``jax.sharding.Sharding``
        for every leaf, or a params-shaped pytree of shardings (a params dict, or an
        ``nnx.State`` as returned by ``nnx.get_named_sharding``).

    Returns:
      ``(config, params, tokenizer)``: params is the dict of ``jax.Array`` leaves, bit-identical
      to what was saved and placed on ``sharding``; tokenizer is None if none was saved.

    Raises:
      FileNotFoundError: no checkpoint at ``path``.
      ValueError: a corrupt or incomplete checkpoint, or shardings that do not match the params.
    """
    path = Path(path).absolute()
    if not path.exists():
        leftovers = sorted(path.parent.glob(f".{path.name}.old-*")) if path.parent.exists() else []
        hint = f"; an interrupted save left the previous one at {leftovers[0]}" if leftovers else ""
        raise FileNotFoundError(
            f"no checkpoint at {path}{hint}; write one with specjax.models.checkpoint.save"
        )
    config = read_config(path)
    shapes = param_shapes(config)
    shardings = _shardings(sharding, shapes)
    try:
        with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as ckptr:
            meta = ckptr.metadata(path / "params").item_metadata.tree
            target = jax.tree.map(
                lambda shape, saved, s: jax.ShapeDtypeStruct(shape, saved.dtype, sharding=s),
                shapes,
                _int_keys(meta),
                shardings,
                is_leaf=lambda x: isinstance(x, tuple),
            )
            params = ckptr.restore(path / "params", args=ocp.args.StandardRestore(target))
        _check_shapes(params, config, str(path))
    except Exception as e:
        raise ValueError(
            f"{path}: the params could not be restored ({first_line(e)}); the checkpoint is "
            "corrupt or does not match its config.json; save it again"
        ) from e
    tokenizer = load_tokenizer(path / "tokenizer") if has_tokenizer(path) else None
    return config, params, tokenizer


def read_config(path: str | Path) -> ModelConfig:
    """The :class:`ModelConfig` of the checkpoint at ``path``, without reading the params.

    Raises:
      ValueError: ``path`` is not a complete specjax checkpoint.
    """
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("format") != FORMAT:
            raise ValueError(f"format {manifest.get('format')!r} is not {FORMAT!r}")
        return config_from_json(json.loads((path / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ValueError(
            f"{path} is not a complete specjax checkpoint ({first_line(e)}); "
            "save it again with specjax.models.checkpoint.save"
        ) from e


def has_tokenizer(path: str | Path) -> bool:
    """Whether the checkpoint at ``path`` carries its tokenizer."""
    return (Path(path) / "tokenizer").is_dir()


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` looks like a directory written by :func:`save`."""
    return (Path(path) / MANIFEST).is_file()


def _shardings(sharding, shapes: dict):
    """A params-shaped tree of shardings from None, one sharding, or a tree of them."""
    if sharding is None:
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    if isinstance(sharding, jax.sharding.Sharding):
        return jax.tree.map(lambda _: sharding, shapes, is_leaf=lambda x: isinstance(x, tuple))
    if isinstance(sharding, nnx.State):
        sharding = nnx.to_pure_dict(sharding)
    want = jax.tree.structure(shapes, is_leaf=lambda x: isinstance(x, tuple))
    got = jax.tree.structure(sharding)
    if want != got:
        raise ValueError(
            f"sharding tree does not match the params: expected {want}, got {got}; pass one "
            "jax.sharding.Sharding or a params-shaped tree of them"
        )
    return sharding


def _int_keys(tree):
    """Orbax metadata spells layer indices as strings; the params use ints."""
    if isinstance(tree, dict):
        return {(int(k) if str(k).isdigit() else k): _int_keys(v) for k, v in tree.items()}
    return tree


def _check_shapes(params, config: ModelConfig, where: str) -> None:
    is_shape = lambda x: isinstance(x, tuple)
    want_flat = dict(
        jax.tree_util.tree_flatten_with_path(param_shapes(config), is_leaf=is_shape)[0]
    )
    got_flat = dict(jax.tree_util.tree_flatten_with_path(params)[0])
    if set(want_flat) != set(got_flat):
        diff = sorted(map(jax.tree_util.keystr, set(want_flat) ^ set(got_flat)))
        raise ValueError(f"{where}: params do not match the config: {diff[:4]} differ")
    for key, shape in want_flat.items():
        if tuple(np.shape(got_flat[key])) != shape:
            raise ValueError(
                f"{where}: {jax.tree_util.keystr(key)} has shape {list(np.shape(got_flat[key]))}, "
                f"config expects {list(shape)}"
            )
