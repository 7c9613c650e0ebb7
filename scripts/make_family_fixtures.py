r"""Makes tests/fixtures/families/<family>/: tiny random models of six Hugging Face families, made
by ``transformers``, with reference outputs, so that torch-free tests can check parity with it.

Families: llama (Llama-3 RoPE scaling, GQA, untied), qwen2 (q/k/v biases, sliding window on the
top layers, tied), qwen3 (per-head q/k RMSNorm, head_dim != hidden / heads), mistral (sliding
window everywhere), gemma2 (softcapping, query_pre_attn_scalar, alternating sliding layers, tied)
and gemma3_text (5:1 sliding/global layers, two RoPE bases, linear scaling on the global ones).
Each directory holds:

* ``model.safetensors`` (float32), ``config.json`` as transformers 5 saves it
  (``rope_parameters``, ``layer_types``) and ``config.hub.json``: the same model in the
  older key style of the family's checkpoints on the hub (``rope_theta``, ``rope_scaling``,
  ``sliding_window_pattern``, ...), checked here to give exactly the same logits;
* ``generation_config.json`` (the stop tokens), ``tokenizer.json`` (byte-level BPE: the 256
  bytes, merges learned from a built-in text, the family's special tokens) and
  ``tokenizer_config.json`` (special tokens, the family's chat template format);
* ``reference.json``: prompts, their logits, 32 greedy tokens each, tokenizer outputs.

Every parameter is drawn with NumPy from a fixed seed; a family's seed is the first from 0 whose
greedy steps all have a top-2 logit gap > 1e-3 (so any implementation within 1e-5 picks the same
tokens) and whose distinguishing features each move the logits clearly (recorded as
``sensitivity``). Float32, eager attention, one CPU thread. From the repository root:

  pip install -e ".[peer]"
  python scripts/make_family_fixtures.py
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers / huggingface_hub import

import torch
import transformers
from absl import app, flags, logging
from fixturelib.families import FAMILIES
from fixturelib.reference import make
from fixturelib.tokens import learn_merges

_OUT_DIR = flags.DEFINE_string("out_dir", "tests/fixtures/families", "Where the families go.")
_FAMILIES = flags.DEFINE_list("families", [], "Families to make (default: all).")
flags.register_validator(
    "families", lambda names: set(names) <= set(FAMILIES), f"one of {list(FAMILIES)}"
)


def main(argv):
    del argv
    logging.set_verbosity(logging.INFO)
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)  # one reduction order, so reruns give the same bytes
    torch.use_deterministic_algorithms(True)
    merges = learn_merges()
    names = _FAMILIES.value or list(FAMILIES)
    for name in names:
        ref = make(FAMILIES[name], merges, Path(_OUT_DIR.value) / name)
        logging.info(
            "%s: seed %d, min top-2 gap %.4g, max |logit| %.3g, sensitivity %s",
            name,
            ref["seed"],
            ref["greedy_min_top2_gap"],
            ref["max_abs_logit"],
            ref["sensitivity"],
        )


if __name__ == "__main__":
    app.run(main)
