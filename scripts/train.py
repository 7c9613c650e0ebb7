r"""Trains a specjax Llama model on a text corpus and exports it as a specjax checkpoint.

  python scripts/train.py --config configs/shakespeare_target.py
  python scripts/train.py --config configs/shakespeare_target.py --config.train.steps=100

Resumes from the newest checkpoint in ``config.workdir`` after an interruption. Writes the final
model (params, config, tokenizer) atomically to ``config.export_dir``, with ``loss.png`` and
``history.jsonl`` next to it.
"""

from __future__ import annotations

import sys

from absl import app, logging
from flax import nnx
from ml_collections import config_flags

from specjax.config_files import loaded_config, parse_flags
from specjax.models import Llama, LlamaConfig
from specjax.models.tokenizer import ByteTokenizer
from specjax.train import corpus, data
from specjax.train.export import export_run
from specjax.train.trainer import TrainConfig, Trainer

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file.")


def run(cfg) -> dict:
    """Trains and exports; returns a summary."""
    if cfg.tokenizer != "bytes":
        raise ValueError(f"unknown tokenizer {cfg.tokenizer!r}; this script supports 'bytes'")
    tokenizer = ByteTokenizer()
    docs = data.read_corpus(corpus.corpus_paths(cfg.corpus))
    token_data = data.tokenize(docs, tokenizer, cfg.val_fraction)
    model_cfg = LlamaConfig(**cfg.model.to_dict())
    data.check_vocab(token_data.vocab_size, model_cfg.vocab_size)
    model = Llama(model_cfg, rngs=nnx.Rngs(cfg.seed))
    print(
        f"model {model_cfg.name}: {model_cfg.num_params:,} parameters; corpus "
        f"{len(token_data.train):,} train / {len(token_data.val):,} held-out tokens",
        flush=True,
    )
    trainer = Trainer(model, TrainConfig(**cfg.train.to_dict()), cfg.workdir)
    history = trainer.fit(token_data)
    summary = {"params": model_cfg.num_params, "steps": trainer.step, **history[-1]}
    title = f"{model_cfg.name}: loss"
    return export_run(
        cfg.export_dir, model, model_cfg, tokenizer, cfg.workdir, history, title, summary
    )


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # keep orbax's per-save INFO lines out
    try:
        run(loaded_config(_CONFIG, "configs/shakespeare_target.py"))
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
