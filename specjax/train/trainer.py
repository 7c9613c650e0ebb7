"""An optax training loop for specjax models: AdamW, warmup + cosine decay, gradient clipping,
periodic validation, orbax checkpoints with resume, and progress lines with tokens/s and ETA.

The loss is pluggable (``loss_fn(model, batch) -> (loss, metrics)``): language modelling by
default, draft distillation against a frozen target in :mod:`specjax.train.distill`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx

from specjax.errors import first_line
from specjax.train import data as data_lib
from specjax.typing import Array

LossFn = Callable[[nnx.Module, Array], tuple[Array, dict]]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation and bookkeeping knobs.

    Attributes:
      steps: total optimizer steps.
      batch_size: B, windows per step.
      seq_len: T, tokens per window.
      learning_rate: peak learning rate.
      end_lr_ratio: final learning rate as a fraction of the peak (cosine decay).
      warmup_steps: linear warmup steps.
      weight_decay: AdamW decoupled weight decay (matrices only, not norms).
      clip_norm: global gradient-norm clip.
      b1: Adam beta1.
      b2: Adam beta2.
      eval_every: steps between validation passes (and loss-history points).
      eval_batches: validation batches per pass.
      log_every: steps between progress lines.
      checkpoint_every: steps between checkpoints (the last step is always saved).
      keep_checkpoints: how many checkpoints to keep.
      seed: seed of the data order (and of nothing else: the model is initialised by the caller).
    """

    steps: int = 1000
    batch_size: int = 32
    seq_len: int = 128
    learning_rate: float = 3e-3
    end_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    clip_norm: float = 1.0
    b1: float = 0.9
    b2: float = 0.95
    eval_every: int = 200
    eval_batches: int = 8
    log_every: int = 50
    checkpoint_every: int = 500
    keep_checkpoints: int = 2
    seed: int = 0

    def __post_init__(self):
        counts = ("steps", "batch_size", "seq_len", "eval_every", "eval_batches", "log_every")
        for name in (*counts, "checkpoint_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.end_lr_ratio <= 1:
            raise ValueError(f"TrainConfig.end_lr_ratio must be in [0, 1], got {self.end_lr_ratio}")
        for name in ("b1", "b2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.weight_decay < 0:
            raise ValueError(f"TrainConfig.weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(
                f"TrainConfig.warmup_steps must be in [0, steps={self.steps}), "
                f"got {self.warmup_steps}"
            )
        if self.learning_rate <= 0 or self.clip_norm <= 0:
            raise ValueError("TrainConfig.learning_rate and clip_norm must be positive")


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Clip by global norm, then AdamW on a warmup + cosine schedule (decay on matrices only)."""
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg.learning_rate,
        warmup_steps=cfg.warmup_steps,
        decay_steps=cfg.steps,
        end_value=cfg.learning_rate * cfg.end_lr_ratio,
    )
    decay_mask = lambda params: jax.tree.map(lambda x: x.ndim >= 2, params)
    return optax.chain(
        optax.clip_by_global_norm(cfg.clip_norm),
        optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay, mask=decay_mask),
    )


def lm_loss(model: nnx.Module, batch: Array) -> tuple[Array, dict]:
    """Next-token cross-entropy on ``batch [B, T+1]`` (mean over tokens, nats)."""
    logits = model(batch[:, :-1]).logits  # [B, T, V]
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()
    return loss, {}


class Trainer:
    """Trains ``model`` in place on token windows, checkpointing into ``workdir``.

    Args:
      model: an nnx model (its parameters are updated; other state is not supported).
      cfg: the :class:`TrainConfig`.
      workdir: checkpoints (``checkpoints/``), ``history.jsonl`` and ``loss.png`` go here.
      loss_fn: ``loss_fn(model, batch) -> (loss, metrics)``; default :func:`lm_loss`.
      log: where progress lines go (default ``print``).
    """

    def __init__(
        self,
        model: nnx.Module,
        cfg: TrainConfig,
        workdir: str | Path,
        loss_fn: LossFn = lm_loss,
        log: Callable[[str], None] = lambda s: print(s, flush=True),
    ):
        self.model, self.cfg, self.workdir, self.log = model, cfg, Path(workdir), log
        # Only nnx.Param leaves are trained; any other variables (e.g. a draft head's frozen
        # copy of the target embedding) are passed to each step as they are.
        self.graphdef, params, self.frozen = nnx.split(model, nnx.Param, ...)
        params = jax.tree.map(jnp.copy, params)  # steps donate their state: keep the model's own
        self.tx = make_optimizer(cfg)
        self.state = {"step": jnp.int32(0), "params": params, "opt_state": self.tx.init(params)}
        self.loss_fn = loss_fn
        self._train_step = jax.jit(self._step, donate_argnums=0)
        self._eval_step = jax.jit(self._eval)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.manager = ocp.CheckpointManager(
            (self.workdir / "checkpoints").absolute(),
            options=ocp.CheckpointManagerOptions(max_to_keep=cfg.keep_checkpoints, create=True),
        )

    def _loss(self, params, frozen, batch):
        return self.loss_fn(nnx.merge(self.graphdef, params, frozen), batch)

    def _step(self, state, frozen, batch):
        (loss, metrics), grads = jax.value_and_grad(self._loss, has_aux=True)(
            state["params"], frozen, batch
        )
        updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), **metrics}
        return {"step": state["step"] + 1, "params": params, "opt_state": opt_state}, metrics

    def _eval(self, params, frozen, batch):
        return self._loss(params, frozen, batch)[0]

    @property
    def step(self) -> int:
        """Completed optimizer steps."""
        return int(self.state["step"])

    def restore_latest(self) -> int | None:
        """Restores the newest checkpoint in the workdir, if any; returns its step.

        Raises:
          ValueError: the checkpoint exists but cannot be read (corrupt or incompatible); the
            files are left untouched.
        """
        latest = self.manager.latest_step()
        if latest is None:
            return None
        path = self.workdir / "checkpoints" / str(latest)
        try:
            abstract = jax.eval_shape(lambda: self.state)
            self.state = self.manager.restore(latest, args=ocp.args.StandardRestore(abstract))
        except Exception as err:  # orbax / tensorstore raise many types for bad files
            raise ValueError(
                f"cannot restore the training checkpoint {path}: {first_line(err)}. "
                "The file is corrupt or from a different model/optimizer; delete that step "
                "directory to resume from an earlier checkpoint, or use a new workdir."
            ) from None
        nnx.update(self.model, self.state["params"])
        return latest

    def save(self) -> None:
        """Writes a checkpoint of the current step (atomic: orbax commits by rename)."""
        self.manager.save(self.step, args=ocp.args.StandardSave(self.state), force=True)
        self.manager.wait_until_finished()

    def evaluate(self, batches) -> float:
        """Mean loss over ``batches`` (each ``[B, T+1]``, or whatever ``loss_fn`` takes)."""
        params = self.state["params"]
        losses = [float(self._eval_step(params, self.frozen, _device(b))) for b in batches]
        return float(np.mean(losses))

    def fit(self, data: data_lib.TokenData) -> list[dict]:
        """Trains up to ``cfg.steps``, resuming from the newest checkpoint in the workdir.

        Returns:
          The loss history (one dict per evaluation: step, train_loss, val_loss).
        """
        cfg = self.cfg
        data_lib.check_fits(data.train, cfg.batch_size, cfg.seq_len, "training")
        data_lib.check_fits(data.val, cfg.batch_size, cfg.seq_len, "validation")
        val_batches = data_lib.eval_batches(data.val, cfg.batch_size, cfg.seq_len, cfg.eval_batches)
        train = lambda step: data_lib.batch_at(
            data.train, step, cfg.batch_size, cfg.seq_len, cfg.seed
        )
        return self.fit_batches(train, val_batches, cfg.batch_size * cfg.seq_len)

    def fit_batches(self, batch_at: Callable[[int], Any], val_batches, tokens_per_step: int):
        """Trains up to ``cfg.steps`` on ``batch_at(step)`` (any pytree ``loss_fn`` takes),
        validating on ``val_batches``, resuming from the newest checkpoint in the workdir.

        Returns:
          The loss history (one dict per evaluation: step, train_loss, val_loss).
        """
        cfg = self.cfg
        resumed = self.restore_latest()
        if resumed is not None:
            self.log(f"resumed from checkpoint at step {resumed}")
        history = self._load_history(upto=self.step)
        step = self.step  # counted on the host from here: reading the state's waits for it
        recent, tick, tick_step = [], time.perf_counter(), step
        start_step, start_time = step, time.perf_counter()
        while step < cfg.steps:
            batch = _device(batch_at(step))
            self.state, metrics = self._train_step(self.state, self.frozen, batch)
            step += 1
            recent.append(metrics["loss"])
            if step % cfg.log_every == 0 or step == cfg.steps:
                now = time.perf_counter()
                rate = (step - tick_step) * tokens_per_step / max(now - tick, 1e-9)
                eta = (cfg.steps - step) * (now - start_time) / max(step - start_step, 1)
                loss = float(np.mean([float(x) for x in recent]))
                self.log(
                    f"step {step}/{cfg.steps}  loss {loss:.4f}  "
                    f"grad_norm {float(metrics['grad_norm']):.3f}  {_extras(metrics)}"
                    f"{rate:,.0f} tok/s  "
                    f"eta {_duration(eta)}"
                )
                recent, tick, tick_step = [], now, step
            if step % cfg.eval_every == 0 or step == cfg.steps:
                val = self.evaluate(val_batches)
                point = {"step": step, "train_loss": float(metrics["loss"]), "val_loss": val}
                history.append(point)
                self._append_history(point)
                self.log(f"step {step}/{cfg.steps}  val_loss {val:.4f}")
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                self.save()
                self.log(f"checkpoint saved at step {step}")
        nnx.update(self.model, self.state["params"])
        return history

    def _history_path(self) -> Path:
        return self.workdir / "history.jsonl"

    def _load_history(self, upto: int) -> list[dict]:
        path = self._history_path()
        if not path.exists():
            return []
        points = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        points = [p for p in points if p["step"] <= upto]  # drop what a killed run wrote later
        path.write_text("".join(json.dumps(p) + "\n" for p in points))
        return points

    def _append_history(self, point: dict) -> None:
        with self._history_path().open("a") as f:
            f.write(json.dumps(point) + "\n")


def _extras(metrics: dict) -> str:
    """The loss function's own metrics of the last step, e.g. ``"top1 0.512  "``."""
    rest = {k: v for k, v in metrics.items() if k not in ("loss", "grad_norm")}
    return "".join(f"{k} {float(v):.3f}  " for k, v in rest.items())


def _device(batch):
    return jax.tree.map(jnp.asarray, batch)


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
