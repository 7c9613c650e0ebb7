"""One entry point for pretrained weights: a ``.gguf`` file, a Hugging Face directory or a
specjax orbax checkpoint -> :class:`Pretrained` (config, NNX model, tokenizer)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.models import checkpoint
from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder
from specjax.models.gguf_loader import load_gguf
from specjax.models.safetensors_loader import load_safetensors, with_dtype
from specjax.models.tokenizer import TokenizerBase


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """A loaded model.

    Attributes:
      config: its :class:`ModelConfig`.
      model: the :class:`Decoder` holding the weights; ``model(tokens [B, T]).logits``
        ``[B, T, V]``.
      tokenizer: its tokenizer, or None when the source had none.
    """

    config: ModelConfig
    model: Decoder = dataclasses.field(repr=False)
    tokenizer: TokenizerBase | None = dataclasses.field(default=None, repr=False)

    @property
    def params(self) -> dict:
        """The params dict of :attr:`model`."""
        return checkpoint.to_params(self.model)

    def save(self, path: str | Path) -> Path:
        """Writes an orbax checkpoint (atomically) that :func:`load_pretrained` reads back."""
        return checkpoint.save(path, self.model, self.config, self.tokenizer)


def build_model(config: ModelConfig, params: dict) -> Decoder:
    """A :class:`Decoder` holding ``params`` (no random initialisation is run).

    Args:
      config: the configuration; leaves are cast to ``config.param_dtype``.
      params: the params dict (NumPy or jax leaves; jax leaves keep their sharding).
    """
    abstract = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    dtype = config.weight_dtype

    def place(x):
        return x.astype(dtype) if isinstance(x, jax.Array) else jnp.asarray(x, dtype)

    nnx.replace_by_pure_dict(state, jax.tree.map(place, params))
    return nnx.merge(graphdef, state)


def detect_format(path: str | Path) -> str:
    """``"gguf"``, ``"hf"`` or ``"checkpoint"``.

    Raises:
      FileNotFoundError: nothing at ``path``.
      ValueError: something that is none of the three.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist; pass a .gguf file, a Hugging Face model directory or a "
            "specjax checkpoint (fetch SmolLM2 with specjax.models.fetch.fetch_smollm2())"
        )
    if path.is_file():
        with open(path, "rb") as f:
            if f.read(4) == b"GGUF" or path.suffix == ".gguf":
                return "gguf"
    elif checkpoint.is_checkpoint(path):
        return "checkpoint"
    elif (path / "config.json").is_file() and any(path.glob("*.safetensors")):
        return "hf"
    raise ValueError(
        f"{path} is not a .gguf file, a Hugging Face directory (config.json + *.safetensors) "
        "or a specjax checkpoint (written by specjax.models.checkpoint.save)"
    )


def load_pretrained(path: str | Path, dtype=None, sharding=None) -> Pretrained:
    """Loads a pretrained Llama from a GGUF file, a HF directory or a specjax checkpoint.

    Args:
      path: the file or directory.
      dtype: parameter/activation dtype (name); default float32 for GGUF and HF, the saved
        dtype for checkpoints.
      sharding: for checkpoints, where to restore the params (see
        :func:`specjax.models.checkpoint.restore`); other formats load onto the default
        device (shard them afterwards).

    Returns:
      A :class:`Pretrained`.
    """
    kind = detect_format(path)
    if kind == "gguf":
        config, params, tokenizer = load_gguf(path, dtype)
    elif kind == "hf":
        config, params, tokenizer = load_safetensors(path, dtype)
    else:
        config, params, tokenizer = checkpoint.restore(path, sharding)
        if dtype is not None:
            config = with_dtype(config, dtype)
    return Pretrained(config, build_model(config, params), tokenizer)
