"""Draft distillation from a config record (``scripts/distill.py``)."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from specjax.cli import validate
from specjax.models import Decoder
from specjax.models.pretrained import load_pretrained
from specjax.train import corpus, data, distill
from specjax.train.export import export_run
from specjax.train.trainer import Trainer


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
    """Distills ``cfg.model`` from the frozen ``cfg.target`` and exports it.

    Every key is checked first (:func:`specjax.cli.validate.check_distill`).

    Returns:
      The summary: held-out acceptance ``alpha`` = E[sum min(p, q)], greedy agreement, losses.
    """
    validate.check_distill(cfg)
    target = load_pretrained(cfg.target)
    docs = data.read_corpus(corpus.corpus_paths(cfg.corpus))
    token_data = data.tokenize(docs, target.tokenizer, cfg.val_fraction)
    model_cfg = validate.model_config(cfg)
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
    draft = Decoder(model_cfg, rngs=nnx.Rngs(cfg.seed))
    print(
        f"draft {model_cfg.name}: {model_cfg.num_params:,} parameters, loss {cfg.loss}, "
        f"data {cfg.data}",
        flush=True,
    )
    trainer = Trainer(draft, validate.train_config(cfg), cfg.workdir, loss_fn=loss)
    history = trainer.fit(train_data)
    batches = data.eval_batches(token_data.val, cfg.train.batch_size, cfg.train.seq_len, 16)
    metrics = distill.acceptance_metrics(target.model, draft, batches, cfg.temperature)
    summary = {"params": model_cfg.num_params, "loss": cfg.loss, "data": cfg.data, **metrics}
    title = f"{model_cfg.name}: {cfg.loss} loss"
    return export_run(
        cfg.export_dir, draft, model_cfg, target.tokenizer, cfg.workdir, history, title, summary
    )
