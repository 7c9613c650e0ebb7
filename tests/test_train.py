"""Training and distillation: loss decreases, kill + resume == uninterrupted, TV distillation
raises acceptance, checkpoint errors leave earlier checkpoints intact, clear input errors."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

from specjax.models import Decoder, config
from specjax.models.tokenizer import ByteTokenizer
from specjax.train import data as data_lib
from specjax.train import distill
from specjax.train.trainer import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parents[1]
TEXT = (
    "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer "
    "the slings and arrows of outrageous fortune, or to take arms against a sea of troubles "
    "and by opposing end them. To die, to sleep; no more; and by a sleep to say we end the "
    "heart-ache and the thousand natural shocks that flesh is heir to. "
) * 12


def byte_model(seed=0, **overrides):
    cfg = config.tiny(vocab_size=256, max_seq_len=64, **overrides)
    return Decoder(cfg, rngs=nnx.Rngs(seed))


def token_data():
    return data_lib.tokenize([TEXT, TEXT[::-1]], ByteTokenizer(), val_fraction=0.2)


QUICK = TrainConfig(
    steps=40,
    batch_size=8,
    seq_len=32,
    learning_rate=1e-2,
    warmup_steps=5,
    eval_every=20,
    eval_batches=2,
    log_every=10,
    checkpoint_every=10,
)


@pytest.mark.slow
def test_loss_decreases_on_a_tiny_corpus(tmp_path):
    logs = []
    trainer = Trainer(byte_model(), QUICK, tmp_path, log=logs.append)
    history = trainer.fit(token_data())
    assert [h["step"] for h in history] == [20, 40]
    assert history[-1]["val_loss"] < 0.75 * np.log(256)  # far below uniform (5.55 nats)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert any("tok/s" in line and "eta" in line for line in logs)
    assert (tmp_path / "history.jsonl").exists()
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())


KILL_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from tests.test_train import QUICK, Trainer, byte_model, token_data
    def log(line):
        print(line, flush=True)
        if "checkpoint saved at step 20" in line:
            time.sleep(60)  # wait here to be killed
    Trainer(byte_model(), QUICK, sys.argv[1], log=log).fit(token_data())
    """
)


@pytest.mark.slow
def test_kill_then_resume_equals_uninterrupted_run(tmp_path):
    reference = Trainer(byte_model(), QUICK, tmp_path / "ref", log=lambda s: None)
    reference.fit(token_data())

    work = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, str(work)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        for line in proc.stdout:
            if "checkpoint saved at step 20" in line:
                proc.send_signal(signal.SIGKILL)
                break
        else:
            pytest.fail("the training subprocess ended before its step-20 checkpoint")
    finally:
        proc.kill()
        proc.wait(timeout=30)
    logs = []
    resumed = Trainer(byte_model(seed=123), QUICK, work, log=logs.append)  # other init: restored
    resumed.fit(token_data())
    assert "resumed from checkpoint at step 20" in logs
    assert resumed.step == reference.step == QUICK.steps
    ref_leaves = jax.tree.leaves(nnx.state(reference.model))
    res_leaves = jax.tree.leaves(nnx.state(resumed.model))
    for a, b in zip(ref_leaves, res_leaves, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_corrupt_checkpoint_clear_error_and_earlier_checkpoint_intact(tmp_path):
    Trainer(byte_model(), dataclasses.replace(QUICK, steps=20), tmp_path, log=lambda s: None).fit(
        token_data()
    )
    ckpts = tmp_path / "checkpoints"
    assert {p.name for p in ckpts.iterdir() if p.name.isdigit()} == {"10", "20"}
    before = {
        p.relative_to(ckpts): p.read_bytes() for p in (ckpts / "10").rglob("*") if p.is_file()
    }
    for f in (ckpts / "20").rglob("*"):  # garble every file of the newest checkpoint
        if f.is_file():
            f.write_bytes(b"\x00garbage" * 3)
    with pytest.raises(ValueError, match=r"cannot restore the training checkpoint .*20.*delete"):
        Trainer(byte_model(), QUICK, tmp_path, log=lambda s: None).fit(token_data())
    after = {p.relative_to(ckpts): p.read_bytes() for p in (ckpts / "10").rglob("*") if p.is_file()}
    assert before == after  # the earlier checkpoint is untouched
    shutil.rmtree(ckpts / "20")  # as the message suggests: resume from the earlier one
    logs = []
    Trainer(byte_model(), QUICK, tmp_path, log=logs.append).fit(token_data())
    assert "resumed from checkpoint at step 10" in logs


@pytest.mark.slow
def test_tv_distillation_raises_acceptance(tmp_path):
    data = token_data()
    target = byte_model(seed=1, dim=48, num_heads=4, num_kv_heads=2)
    Trainer(target, dataclasses.replace(QUICK, steps=60), tmp_path / "t", log=lambda s: None).fit(
        data
    )
    draft = byte_model(seed=2, num_layers=1)
    batches = data_lib.eval_batches(data.val, 8, 32, 2)
    before = distill.acceptance_metrics(target, draft, batches)
    loss = distill.distill_loss(target, "tv")
    cfg = dataclasses.replace(QUICK, steps=60)
    Trainer(draft, cfg, tmp_path / "d", loss_fn=loss, log=lambda s: None).fit(data)
    after = distill.acceptance_metrics(target, draft, batches)
    assert after["alpha"] > before["alpha"] + 0.2, (before, after)
    assert after["greedy_agreement"] > before["greedy_agreement"]


def test_sample_from_target_shapes_and_determinism():
    model = byte_model()
    prompts = np.array([[84, 111], [97, 32]], np.int32)
    a = distill.sample_from_target(model, prompts, 10, jax.random.key(0))
    b = distill.sample_from_target(model, prompts, 10, jax.random.key(0))
    assert a.shape == (2, 12) and (np.asarray(a[:, :2]) == prompts).all()
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bad_inputs_get_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="corpus is empty"):
        data_lib.tokenize(["", "   "], ByteTokenizer())
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.txt").write_text("  \n")
    with pytest.raises(ValueError, match="is empty"):
        data_lib.read_corpus(empty)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data_lib.read_corpus(tmp_path / "missing")
    small = data_lib.tokenize(["tiny text, far too short"], ByteTokenizer(), val_fraction=0.5)
    with pytest.raises(ValueError, match=r"fewer than one batch of 8 x 33 = 264"):
        Trainer(byte_model(), QUICK, tmp_path / "w", log=lambda s: None).fit(small)
    with pytest.raises(ValueError, match=r"tokenizer vocabulary \(256\) is larger than"):
        data_lib.check_vocab(256, 64)
    with pytest.raises(ValueError, match=r"unknown distillation loss 'kl'.*forward_kl, tv, ce"):
        distill.distill_loss(byte_model(), "kl")
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainConfig(steps=10, warmup_steps=10)


def test_bfloat16_training_reduces_loss(tmp_path):
    model = byte_model(dtype="bfloat16")  # bf16 compute, fp32 master parameters
    cfg = dataclasses.replace(QUICK, steps=30, eval_every=15, checkpoint_every=30)
    history = Trainer(model, cfg, tmp_path, log=lambda s: None).fit(token_data())
    assert history[-1]["val_loss"] < 0.8 * np.log(256)
    assert np.isfinite([h["train_loss"] for h in history]).all()
