"""The model pairs the claims are measured on, and their prompts.

* ``shakespeare``: the committed byte-level target (3.2M parameters) and its distilled draft
  (0.43M), ``checkpoints/shakespeare``;
* ``smollm2``: SmolLM2-135M-Instruct (the GGUF fetched through pip) with a layer-truncated
  self-draft (its first layers, weights shared), as ``configs/smollm2.py
  --config.drafter=self`` decodes;
* ``smollm2_head``: the same target with its learned EAGLE-3-class draft head
  (``checkpoints/smollm2_eagle``, :class:`specjax.drafters.FeatureDrafter`), as
  ``configs/smollm2_eagle.py`` decodes.

The models come from :func:`specjax.models.load_pair` (``shakespeare``, ``smollm2_self``,
``smollm2_eagle``); this module adds the prompts and the report's words. A pair carries how to
build its drafter for (sampling parameters, K i.i.d. paths, L), so the claim groups never ask
what kind of draft it is.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
from collections.abc import Callable
from typing import Any

from specjax.drafters import FeatureDrafter, ModelDrafter
from specjax.models import PureModel, ShippedPair, load_pair
from specjax.sampling import SamplingParams
from specjax.train.feature_data import encode_chat

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMES = ("shakespeare", "smollm2", "smollm2_head")
"""Every pair, in report order."""

SHAKESPEARE_PROMPTS = (
    "ROMEO:\n",
    "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n",
    "KING RICHARD III:\n",
    "HAMLET:\nTo be, or not to be",
    "MACBETH:\n",
    "PORTIA:\nThe quality of mercy is not strain'd,\n",
    "KING LEAR:\n",
)

SMOLLM2_PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a bicycle works to a ten-year-old.",
    "Describe your ideal weekend in a small town by the sea.",
    "What are the main causes of the seasons on Earth?",
)

MakeDrafter = Callable[[SamplingParams, int, int], Any]
"""``(sampling params, K, L) -> drafter`` proposing K i.i.d. paths of L tokens."""


@dataclasses.dataclass(frozen=True)
class Pair:
    """A target, how to build its drafter, and the prompts (token ids).

    Attributes:
      name: one of :data:`NAMES`.
      label: a few words for the claim rows.
      description: one line for the report.
      target: the target model.
      make_drafter: builds the drafter (:data:`MakeDrafter`); its K paths are i.i.d.
      prompts: token ids per row.
      stop_tokens: ids that end a row (none: every row decodes its full token count).
      draft: the draft model of a model pair (SSD drafts with it); None for a draft head.
    """

    name: str
    label: str
    description: str
    target: PureModel
    make_drafter: MakeDrafter
    prompts: list[list[int]]
    stop_tokens: tuple[int, ...] = ()
    draft: PureModel | None = None


def _model_pair(name, label, description, target: PureModel, draft: PureModel, prompts) -> Pair:
    make = lambda sp, k, l: ModelDrafter(draft, num_paths=k, draft_len=l, sampling=sp)
    return Pair(name, label, description, target, make, prompts, draft=draft)


def shakespeare(batch: int) -> Pair:
    """The committed pair with the first ``batch`` prompts (repeated if more)."""
    shipped = load_pair("shakespeare")
    texts = [SHAKESPEARE_PROMPTS[i % len(SHAKESPEARE_PROMPTS)] for i in range(batch)]
    return _model_pair(
        "shakespeare",
        "Shakespeare pair",
        "Shakespeare pair: target 3.2M parameters, forward-KL-distilled draft 0.43M, byte-level "
        f"(V = 256); {batch} prompts such as {texts[0]!r}",
        shipped.target,
        shipped.draft,
        [shipped.tokenizer.encode(t) for t in texts],
    )


@functools.cache
def _smollm2(source: str) -> ShippedPair:
    """SmolLM2 loaded once for both of its pairs (each shares this target)."""
    return load_pair("smollm2", source=source)


def _chat_prompts(tokenizer, batch: int) -> list[list[int]]:
    return encode_chat(tokenizer, [SMOLLM2_PROMPTS[i % len(SMOLLM2_PROMPTS)] for i in range(batch)])


def smollm2(source: str, layers: int, batch: int) -> Pair:
    """SmolLM2-135M-Instruct with its first ``layers`` layers as the draft, chat prompts."""
    shipped = load_pair("smollm2_self", draft_layers=layers, reuse=_smollm2(source))
    return _model_pair(
        "smollm2",
        f"SmolLM2-135M, {layers}-layer self-draft",
        f"SmolLM2-135M-Instruct (Q4_1 GGUF dequantized to fp32, V = 49152) with a {layers}-of-30-"
        f"layer self-draft (weights shared, not trained as a draft); {batch} chat prompts",
        shipped.target,
        shipped.draft,
        _chat_prompts(shipped.tokenizer, batch),
    )


def smollm2_head(source: str, head_dir: str, batch: int) -> Pair:
    """SmolLM2-135M-Instruct with the learned feature draft head saved in ``head_dir`` (relative
    to the repository root unless absolute), the same chat prompts as ``smollm2``."""
    path = pathlib.Path(head_dir)
    path = path if path.is_absolute() else ROOT / path
    shipped = load_pair("smollm2_eagle", head=path, reuse=_smollm2(source))
    head = shipped.draft  # split once, shared by drafters
    config = head.config
    meta = json.loads((path / "config.json").read_text()).get("summary", {})
    heldout = meta.get("heldout", {})
    trained = f"held-out Σ min(p, q) {heldout['overlap']:.2f}; " if "overlap" in heldout else ""
    return Pair(
        "smollm2_head",
        "SmolLM2-135M + learned draft head",
        f"SmolLM2-135M-Instruct with its learned EAGLE-3-class draft head `{head_dir}` "
        f"(`FeatureDrafter`: one decoder layer reading target blocks {config.feature_layers}, "
        f"W = {config.draft_vocab} draft ids, q = 0 outside them; {trained}K paths i.i.d.); "
        f"{batch} chat prompts",
        shipped.target,
        lambda sp, k, l: FeatureDrafter(head, num_paths=k, draft_len=l, sampling=sp),
        _chat_prompts(shipped.tokenizer, batch),
    )
