r"""Distills a small draft from a frozen target checkpoint (DistillSpec-style).

  python scripts/distill.py --config configs/shakespeare_draft.py
  # the baseline: the same draft trained on data alone
  python scripts/distill.py --config configs/shakespeare_draft.py --config.loss=ce \
      --config.workdir=runs/shakespeare_draft_ce \
      --config.export_dir=checkpoints/shakespeare/draft_ce

Losses: ``tv`` (total variation, what acceptance rewards), ``forward_kl``, ``ce`` (data only).
Data: ``corpus`` windows or ``target_samples`` (text sampled from the target at temperature 1).
Writes the draft (atomically) to ``config.export_dir`` with ``loss.png`` and ``summary.json``
holding held-out acceptance against the target: alpha = E[sum min(p, q)] and greedy agreement.
"""

from __future__ import annotations

import sys

import jax
import numpy as np
from absl import app, logging
from flax import nnx
from ml_collections import config_flags

from specjax.config_files import loaded_config, parse_flags
from specjax.models import Llama, LlamaConfig
from specjax.models.pretrained import load_pretrained
from specjax.train import corpus, data, distill
from specjax.train.export import export_run
from specjax.train.trainer import TrainConfig, Trainer

_CONFIG = config_flags.DEFINE_config_file("config", None, "Distillation config file.")


def target_samples(target, token_data, cfg) -> data.TokenData:
    """Replaces the training text by text sampled from the target after corpus prompts."""
    rng = np.random.default_rng(cfg.seed)
    chunks = []
    for i in range(cfg.num_samples // cfg.sample_batch):
        starts = rng.integers(0, len(token_data.train) - cfg.prompt_len, size=cfg.sample_batch)
        prompts = np.stack([token_data.train[s : s + cfg.prompt_len] for s in starts])
        out = distill.sample_from_target(target, prompts, cfg.sample_len, jax.random.key(i))
        chunks.append(np.asarray(out).reshape(-1))
        print(f"sampled {(i + 1) * cfg.sample_batch}/{cfg.num_samples} sequences", flush=True)
    return data.TokenData(np.concatenate(chunks), token_data.val, token_data.vocab_size)


def run(cfg) -> dict:
    """Distills and exports; returns the summary."""
    distill.check_loss(cfg.loss)  # cheap checks first, before loading anything
    if cfg.data not in ("corpus", "target_samples"):
        raise ValueError(f"unknown data source {cfg.data!r}; choose 'corpus' or 'target_samples'")
    target = load_pretrained(cfg.target)
    docs = data.read_corpus(corpus.corpus_paths(cfg.corpus))
    token_data = data.tokenize(docs, target.tokenizer, cfg.val_fraction)
    model_cfg = LlamaConfig(**cfg.model.to_dict())
    if model_cfg.vocab_size != target.config.vocab_size:
        raise ValueError(
            f"draft vocab_size ({model_cfg.vocab_size}) != target vocab_size "
            f"({target.config.vocab_size}); draft and target must share one tokenizer"
        )
    loss = distill.distill_loss(target.model, cfg.loss, cfg.temperature)
    if cfg.data == "target_samples":
        train_data = target_samples(target.model, token_data, cfg)
    else:
        train_data = token_data
    draft = Llama(model_cfg, rngs=nnx.Rngs(cfg.seed))
    print(
        f"draft {model_cfg.name}: {model_cfg.num_params:,} parameters, loss {cfg.loss}, "
        f"data {cfg.data}",
        flush=True,
    )
    trainer = Trainer(draft, TrainConfig(**cfg.train.to_dict()), cfg.workdir, loss_fn=loss)
    history = trainer.fit(train_data)
    batches = data.eval_batches(token_data.val, cfg.train.batch_size, cfg.train.seq_len, 16)
    metrics = distill.acceptance_metrics(target.model, draft, batches, cfg.temperature)
    summary = {"params": model_cfg.num_params, "loss": cfg.loss, "data": cfg.data, **metrics}
    title = f"{model_cfg.name}: {cfg.loss} loss"
    return export_run(
        cfg.export_dir, draft, model_cfg, target.tokenizer, cfg.workdir, history, title, summary
    )


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # keep orbax's per-save INFO lines out
    try:
        run(loaded_config(_CONFIG, "configs/shakespeare_draft.py"))
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
