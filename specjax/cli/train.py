"""Training from a config record (``scripts/train.py``): checks, corpus, model, fit, export."""

from __future__ import annotations

from flax import nnx

from specjax.cli import validate
from specjax.models import Decoder
from specjax.models.tokenizer import ByteTokenizer
from specjax.train import corpus, data
from specjax.train.export import export_run
from specjax.train.trainer import Trainer


def run(cfg) -> dict:
    """Trains ``cfg.model`` on ``cfg.corpus`` and exports it to ``cfg.export_dir``.

    Every key is checked first (:func:`specjax.cli.validate.check_train`); training resumes
    from the newest checkpoint in ``cfg.workdir``.

    Returns:
      The summary written next to the export (params, steps, final losses, paths).
    """
    validate.check_train(cfg)
    tokenizer = ByteTokenizer()
    docs = data.read_corpus(corpus.corpus_paths(cfg.corpus))
    token_data = data.tokenize(docs, tokenizer, cfg.val_fraction)
    model_cfg = validate.model_config(cfg)
    data.check_vocab(token_data.vocab_size, model_cfg.vocab_size)
    model = Decoder(model_cfg, rngs=nnx.Rngs(cfg.seed))
    print(
        f"model {model_cfg.name}: {model_cfg.num_params:,} parameters; corpus "
        f"{len(token_data.train):,} train / {len(token_data.val):,} held-out tokens",
        flush=True,
    )
    trainer = Trainer(model, validate.train_config(cfg), cfg.workdir)
    history = trainer.fit(token_data)
    summary = {"params": model_cfg.num_params, "steps": trainer.step, **history[-1]}
    title = f"{model_cfg.name}: loss"
    return export_run(
        cfg.export_dir, model, model_cfg, tokenizer, cfg.workdir, history, title, summary
    )
