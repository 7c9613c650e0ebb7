"""scripts/bench_memory.py: per-device bytes from eval_shape and the compiled sharded step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_memory_report_for_a_small_preset_on_8_devices(tmp_path):
    report = tmp_path / "memory.md"
    out = subprocess.run(
        [
            sys.executable,
            "scripts/bench_memory.py",
            "--devices=8",
            "--target=tiny",
            "--draft=tiny",
            "--batch=4",
            "--capacity=64",
            "--meshes=4,2;2,4",
            f"--output={report}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = report.read_text()
    assert "| 4,2 |" in text and "compiled temporaries" in text
    # tiny has 2 KV heads: a model axis of 4 is refused with both numbers named
    assert "num_kv_heads 2 is not divisible by the mesh's model axis 4" in out.stdout
    row = next(line for line in text.splitlines() if line.startswith("| 4,2 |"))
    assert "MiB" in row
