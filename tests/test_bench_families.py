"""``scripts/bench_families.py --quick`` (slow tier, needs the peer extra: transformers and
torch): every family's random model loads in specjax with transformers' logits, every
configuration generates transformers' greedy ids, and the report has one row per family."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="needs the peer extra: pip install -e '.[peer]'")

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text")


@pytest.mark.slow
def test_quick_run_reports_every_family(tmp_path):
    out = tmp_path / "families.md"
    cmd = [sys.executable, "scripts/bench_families.py", "--quick", f"--output={out}"]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ")]
    body = {line.split("|")[1].strip(): line for line in rows[2:]}
    assert sorted(body) == sorted(FAMILIES)
    assert all("| yes |" in line and "MISMATCH" not in line for line in body.values())
