"""scripts/bench_decode.py end to end on a tiny grid of the Shakespeare pair (about 20 s)."""

from __future__ import annotations

import datetime
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _rows(text: str, first_cell: str) -> list[list[str]]:
    """Cells of the Markdown table rows whose first cell is ``first_cell``."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            out.append(cells)
    return out


@pytest.mark.slow
def test_quick_run_writes_report_and_plots(tmp_path):
    report = tmp_path / "decode.md"
    cmd = [
        sys.executable,
        "scripts/bench_decode.py",
        "--quick",
        "--pairs=shakespeare",
        "--temperatures=0",
        "--verifiers=block",
        "--paths=1",
        "--lengths=2",
        "--max_new_tokens=8",
        f"--output={report}",
        f"--plot_dir={tmp_path}",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    text = report.read_text(encoding="utf-8")
    assert text in out.stdout  # the report is also printed

    # Header: the exact command, the machine, the date.
    assert "`python scripts/bench_decode.py --quick --pairs=shakespeare" in text
    assert "jax " in text and "logical CPUs" in text
    assert datetime.date.today().isoformat() in text

    # One results table (shakespeare, T = 0) with one sane row.
    assert "#### shakespeare, temperature 0" in text
    (row,) = _rows(text, "block")[:1]
    _, k, l, eff, se, accept, tok_s, speedup, steps, runs, compile_s, same = row
    assert (k, l) == ("1", "2")
    assert 1.0 <= float(eff) <= 3.0  # at most L + 1 tokens per target call
    assert 0.0 <= float(accept) <= 1.0 and float(se) >= 0
    assert float(tok_s) > 0 and float(speedup.rstrip("×")) > 0
    assert 1 <= int(steps) <= 8 and int(runs) >= 1 and float(compile_s) > 0
    assert same == "yes"  # temperature 0: identical to the autoregressive tokens
    # 8 tokens came from `steps` target calls; the last one may have accepted up to L = 2 more.
    assert 8 / int(steps) <= float(eff) + 1e-6 and float(eff) <= 10 / int(steps) + 1e-6

    # Loop overhead: the baseline and the block configuration, with finite numbers.
    assert "ONE compiled XLA executable" in text and "0 host-communication ops" in text
    overhead = [r for r in _rows(text, "shakespeare") if len(r) == 16]
    labels = [r[2] for r in overhead]
    assert "autoregressive" in labels and "block K=1 L=2" in labels
    for r in overhead:
        assert float(r[4]) > 0 and math.isfinite(float(r[10].rstrip("%")))

    assert "#### Goal checks" in text and "Wall time" in text

    if importlib.util.find_spec("matplotlib") is not None:
        for name in ("decode_block_efficiency_shakespeare", "decode_histogram_shakespeare"):
            png = tmp_path / f"{name}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
