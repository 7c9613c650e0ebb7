r"""Converts a draft head between layouts: specjax's own, the EAGLE / SpecForge layout
(``LlamaForCausalLMEagle3``, ``midlayer.*``) and the speculators layout (vLLM's), detected from
--src. A head written as speculators or eagle is served by vLLM and SGLang unchanged:

  vllm serve <target> --speculative-config '{"model": "<dst>", "method": "eagle3", \
      "num_speculative_tokens": 3}'

Command:
  python scripts/convert_head.py --src=checkpoints/smollm2_eagle --dst=/tmp/smollm2_head \
      --format=speculators --target=smollm2

--target (a specjax model source: a Hugging Face directory, a .gguf file, ``smollm2``) gives
the embedding a head without its own reads and the layer count of the published layouts'
default feature layers; a Hugging Face directory also becomes the speculators verifier. A
head standardised with a per-dimension shift (specjax's heads before scale-only
standardisation) cannot be written in a published layout, which has no ``fc`` bias; with
--drop_shift it is written without it, after measuring what that costs: first-token agreement
with the target's greedy token on --eval_prompts MT-bench questions, with and without.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from absl import app, flags

from specjax.models.eagle_formats import (
    FORMATS,
    detect_format,
    export_head,
    load_head,
    save_head,
)
from specjax.models.sources import load_model
from specjax.train import eagle, feature_data, prompts

_SRC = flags.DEFINE_string("src", None, "the head directory to read (any layout)", required=True)
_DST = flags.DEFINE_string("dst", None, "the directory to write", required=True)
_FORMAT = flags.DEFINE_enum("format", "speculators", list(FORMATS), "the layout to write")
_TARGET = flags.DEFINE_string("target", "smollm2", "the target model (a load_model source)")
_DROP = flags.DEFINE_bool("drop_shift", False, "write a head with a shift without it")
_EVAL = flags.DEFINE_integer("eval_prompts", 16, "MT-bench questions --drop_shift measures on")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def agreement(head, target, tokenizer, count: int) -> float:
    """First-token agreement of ``head`` with the target's greedy token along the target's own
    greedy answers to ``count`` MT-bench questions (64 tokens each)."""
    texts = [q["turns"][0] for q in prompts.mtbench_questions()[:count]]
    shard = feature_data.make_shard(target, tokenizer, texts, temperature=0.0, max_new_tokens=64)
    stored = [int(i) for i in shard["layers"]]
    index = [stored.index(i) for i in head.config.feature_layers]
    windows = eagle.Windows(shard, index, np.asarray(head.d2t[...]), seq_len=128, ttt=1)
    batches = eagle.eval_batches(windows, 4, 4)
    return eagle.evaluate_head(head, target, windows, batches)["agreement"]


def main(argv):
    del argv
    try:
        kind = detect_format(_SRC.value)
        target, tokenizer = load_model(_TARGET.value, role="target")
        head = load_head(_SRC.value, target)
    except (FileNotFoundError, ValueError) as err:  # one line, naming the fix
        raise SystemExit(f"error: {err}") from None
    c = head.config
    log(f"read {_SRC.value}: a {kind} head of {c.num_layers} layer(s), W = {c.draft_vocab}, "
        f"reading target blocks {list(c.feature_layers)}")  # fmt: skip
    shifted = bool(np.any(np.asarray(head.feature_shift[...])))
    if _FORMAT.value == "specjax":
        save_head(_DST.value, head, {"converted_from": f"{_SRC.value} ({kind})"})
        log(f"wrote {_DST.value} (specjax layout)")
        return
    if shifted and not _DROP.value:
        raise SystemExit(
            "error: the head standardises its features with a shift, which the published "
            "layouts cannot hold (fc has no bias); fine-tune it without one "
            "(scripts/train_draft_head.py --init=...) or pass --drop_shift to measure and drop it"
        )
    if shifted:
        before = agreement(head, target, tokenizer, _EVAL.value)
        after = agreement(eagle.without_shift(head), target, tokenizer, _EVAL.value)
        log(f"dropping the shift: first-token agreement {before:.3f} -> {after:.3f} on "
            f"{_EVAL.value} MT-bench questions")  # fmt: skip
    verifier = None
    target_dir = Path(_TARGET.value)
    if (target_dir / "config.json").is_file():
        arch = json.loads((target_dir / "config.json").read_text()).get("architectures", [])
        verifier = {"name_or_path": str(target_dir.resolve()), "architectures": arch}
    export_head(_DST.value, head, _FORMAT.value, drop_shift=_DROP.value, verifier=verifier)
    back = load_head(_DST.value, target)  # what was written reads back as the same head
    x = np.random.default_rng(0).normal(size=(1, 4, len(c.feature_layers), c.target_dim))
    x = x * np.asarray(head.feature_scale[...])
    want, got = np.asarray(eagle.without_shift(head).fuse(x)), np.asarray(back.fuse(x))
    err = float(np.abs(got - want).max() / np.abs(want).max())
    if err > 1e-5:
        raise SystemExit(f"error: the written head reads back differently (relative {err:.1e})")
    log(f"wrote {_DST.value} ({_FORMAT.value} layout; read back: fc relative error {err:.1e})")


if __name__ == "__main__":
    app.run(main)
