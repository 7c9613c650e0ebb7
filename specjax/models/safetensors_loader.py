"""Hugging Face model directories (``config.json`` + ``*.safetensors``, one file or sharded with
``model.safetensors.index.json``), in fp32, bf16 or fp16, read without torch.

:func:`load_safetensors` reads the whole model on the host; :func:`read_sharded` builds each
parameter straight onto its sharding, every process reading only the slices of the files that
its devices hold. The tensor mapping is :mod:`specjax.models.hf_params`, the config mapping
:mod:`specjax.models.hf_config`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np

from specjax.models.config import DTYPES, ModelConfig
from specjax.models.hf_config import config_from_hf, config_to_hf
from specjax.models.hf_params import Params, check_names, hf_to_params, nest, params_to_hf, sources
from specjax.models.safetensors_file import SafetensorsFile, save_file
from specjax.models.tokenizer import Tokenizer

# Where the decoder's tensors sit: causal LMs under ``model.``; Gemma 3's multimodal
# checkpoints under ``language_model.model.`` (hub) or ``model.language_model.`` (transformers 5).
_PREFIXES = ("model.", "language_model.model.", "model.language_model.")
_HEADS = {"model.": "lm_head.", "language_model.model.": "language_model.lm_head."}


class Tensors:
    """The tensors of a directory's safetensors files under their canonical HF names
    (``model.*`` and ``lm_head.weight``), each read lazily from the file that holds it."""

    def __init__(self, directory: Path):
        index_path = directory / "model.safetensors.index.json"
        if index_path.is_file():
            try:
                names = json.loads(index_path.read_text())["weight_map"]
                where = {k: directory / v for k, v in names.items()}
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"{index_path} is not a safetensors index ({e!r})") from e
            for f in sorted(set(where.values())):
                if not f.is_file():
                    raise FileNotFoundError(f"{f} (listed in {index_path.name}) does not exist")
        else:
            where = {}
            for f in sorted(directory.glob("*.safetensors")):
                where.update(dict.fromkeys(SafetensorsFile(f).keys(), f))
        if not where:
            raise FileNotFoundError(f"no *.safetensors files in {directory}")
        prefix = next((p for p in _PREFIXES if p + "embed_tokens.weight" in where), "model.")
        head = _HEADS.get(prefix, "lm_head.")
        self.real = {}  # canonical name -> name in the files
        for name in where:
            if name.startswith(prefix):
                self.real["model." + name[len(prefix) :]] = name
            elif name.startswith(head):
                self.real["lm_head." + name[len(head) :]] = name
        self.where = where
        self.files: dict[Path, SafetensorsFile] = {}
        self.source = str(directory)

    @property
    def names(self) -> set[str]:
        """The canonical names present."""
        return set(self.real)

    def get(self, name: str, index: tuple | None = None) -> np.ndarray:
        """Tensor ``name`` (canonical), or its slice ``index``, in its stored dtype."""
        real = self.real[name]
        f = self.where[real]
        if f not in self.files:
            self.files[f] = SafetensorsFile(f)
        try:
            return self.files[f].get(real, index)
        except (KeyError, ValueError) as e:
            raise ValueError(f"{f}: cannot read tensor {real} ({e}); the file is corrupt") from e

    def shape(self, name: str) -> tuple[int, ...]:
        real = self.real[name]
        f = self.where[real]
        if f not in self.files:
            self.files[f] = SafetensorsFile(f)
        return self.files[f].shape(real)


def read_config(directory: str | Path, dtype=None) -> ModelConfig:
    """The :class:`ModelConfig` of a HF directory's ``config.json``, in ``dtype`` (default
    float32); nothing else is read.

    Raises:
      FileNotFoundError: no ``config.json``.
      ValueError: an unreadable config, or one specjax does not implement (named).
    """
    directory = Path(directory)
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(
            f"no config.json in {directory}; a Hugging Face model directory needs config.json "
            "next to its *.safetensors files"
        )
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        name = cfg.get("_name_or_path") or directory.name
        config = config_from_hf(cfg, name=name)
    except (KeyError, TypeError) as e:
        raise ValueError(f"{cfg_path}: not a usable config.json (missing or bad {e!r})") from e
    except ValueError as e:  # "config.json <key>: ..." -> "<dir>/config.json <key>: ..."
        text = str(e)
        raise ValueError(f"{directory}/{text}" if text.startswith("config.json") else text) from e
    return with_dtype(config, dtype)


def _checked(directory: Path, dtype) -> tuple[ModelConfig, Tensors]:
    config = read_config(directory, dtype)
    tensors = Tensors(directory)
    check_names(tensors.names, config, source=str(directory))
    for s in sources(config).values():
        got = tensors.shape(s.name)
        if got != s.hf_shape:
            raise ValueError(
                f"{directory}: tensor {s.name} has shape {list(got)} but config.json expects "
                f"{list(s.hf_shape)}; the weights and config do not match"
            )
    return config, tensors


def _tokenizer(directory: Path):
    return Tokenizer.from_hf_dir(directory) if (directory / "tokenizer.json").is_file() else None


def load_safetensors(directory: str | Path, dtype=None):
    """Loads a HF directory: ``config.json`` and one or more ``*.safetensors`` files (a sharded
    checkpoint's ``model.safetensors.index.json`` is followed when present).

    Args:
      directory: the model directory.
      dtype: dtype (name) of the returned parameters and the config (default float32).

    Returns:
      ``(config, params, tokenizer)``; ``tokenizer`` is None without a ``tokenizer.json``.

    Raises:
      FileNotFoundError: no directory, no ``config.json`` or no safetensors file.
      ValueError: an unreadable config or weight file, missing or unused tensors, or shape
        mismatches; all but a corrupt tensor are found before any weight is read.
    """
    directory = Path(directory)
    config, tensors = _checked(directory, dtype)
    params = hf_to_params(
        tensors.get, tensors.names, config, config.weight_dtype, source=str(directory)
    )
    return config, params, _tokenizer(directory)


def read_sharded(directory: str | Path, dtype, shardings: Params):
    """A HF directory's params placed on ``shardings`` (a params-shaped dict of
    ``jax.sharding.Sharding``) block by block: each process reads, and each device receives,
    only the slices it holds.

    Returns:
      ``(config, params, tokenizer)`` with ``jax.Array`` leaves.
    """
    directory = Path(directory)
    config, tensors = _checked(directory, dtype)
    cast = np.dtype(config.weight_dtype)

    def place(path, s):
        sharding = shardings
        for key in path:
            sharding = sharding[key]
        block = lambda index: s.read(tensors.get, index).astype(cast)
        return jax.make_array_from_callback(s.shape, sharding, block)

    params = nest({path: place(path, s) for path, s in sources(config).items()})
    return config, params, _tokenizer(directory)


def save_safetensors(
    directory: str | Path, params: Params, config: ModelConfig, max_shard_bytes: int | None = None
) -> Path:
    """Writes ``config.json`` and HF-layout safetensors (sharded with an index json when the
    weights exceed ``max_shard_bytes``). Returns the directory."""
    directory = Path(directory)
    tensors = params_to_hf(params, config)  # (first: it refuses a fused or quantized model)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config_to_hf(config), indent=2) + "\n")
    shards, size = [{}], 0
    for name, x in tensors.items():
        if max_shard_bytes and size + x.nbytes > max_shard_bytes and shards[-1]:
            shards.append({})
            size = 0
        shards[-1][name] = x
        size += x.nbytes
    meta = {"format": "pt"}  # what transformers checks before loading a file
    if len(shards) == 1:
        save_file(shards[0], directory / "model.safetensors", meta)
        return directory
    weight_map = {}
    for k, shard in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, directory / fname, meta)
        weight_map.update(dict.fromkeys(shard, fname))
    index = {"metadata": {"total_size": sum(x.nbytes for x in tensors.values())}}
    index["weight_map"] = weight_map
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return directory


def with_dtype(config: ModelConfig, dtype) -> ModelConfig:
    """``config`` with parameters and activations in ``dtype`` (a name or a NumPy/JAX dtype;
    None keeps float32)."""
    name = "float32" if dtype is None else np.dtype(DTYPES.get(dtype, dtype)).name
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return dataclasses.replace(config, dtype=name, param_dtype=name)
