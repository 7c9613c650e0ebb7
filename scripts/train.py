r"""Trains a specjax Llama model on a text corpus and exports it as a specjax checkpoint.

  python scripts/train.py --config configs/shakespeare_target.py
  python scripts/train.py --config configs/shakespeare_target.py --config.train.steps=100

Resumes from the newest checkpoint in ``config.workdir`` after an interruption. Writes the final
model (params, config, tokenizer) atomically to ``config.export_dir``, with ``loss.png`` and
``history.jsonl`` next to it.
"""

from __future__ import annotations

from absl import app, logging
from ml_collections import config_flags

from specjax.cli import train
from specjax.cli.app import run_or_exit
from specjax.config_files import loaded_config, parse_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file.")


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # keep orbax's per-save INFO lines out
    run_or_exit(train.run, loaded_config(_CONFIG, "configs/shakespeare_target.py"))


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
