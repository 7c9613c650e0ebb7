"""scripts/bench_accelerator.py --quick end to end: every section runs (tiny random models on
the CPU, about 40 s), and the Markdown and JSON reports hold all of them without an error."""

from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
import sys
from pathlib import Path

import benchlib
import pytest
from benchlib.accelerator import QUICK, SECTIONS
from benchlib.accelerator.kernels import decode_models
from benchlib.accelerator.shared import Bench

import specjax

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~80 s on 2 cores: a benchmark's smoke run, like test_bench_serve's
def test_quick_run_writes_every_section(tmp_path):
    cmd = [sys.executable, "scripts/bench_accelerator.py", "--quick", f"--out_dir={tmp_path}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    md, js = (tmp_path / f"accelerator_quick_{date}{ext}" for ext in (".md", ".json"))
    assert md.is_file() and js.is_file(), sorted(p.name for p in tmp_path.iterdir())
    assert "[bench_accelerator +" in out.stderr  # progress lines with the elapsed time

    report = json.loads(js.read_text(encoding="utf-8"))
    assert report["quick"] is True and report["finished"] is True
    assert list(report["sections"]) == list(SECTIONS)
    for name, section in report["sections"].items():
        assert section["errors"] == [], (name, section["errors"])
        assert section["status"] == "ok", (name, section["status"], section["notes"])
        assert section["rows"], name

    rows = report["sections"]
    versions = {r["what"]: r["value"] for r in rows["versions"]["rows"]}
    assert {"jax", "jaxlib", "flax", "numpy", "python", "platform", "device kind"} <= set(versions)
    # The digest of the measured sources, not of nothing (a wrong path once gave e3b0c44298fc).
    source = Path(specjax.__file__).parent
    assert versions["specjax sources sha256"] == benchlib.source_digest(source, recursive=True)
    assert rows["bandwidth"]["rows"][0]["gb_s"] > 0
    decode = rows["decode"]["rows"]
    assert len({r["model"] for r in decode}) == 3
    assert all(r["ms"] > 0 and r["floor_ms"] > 0 for r in decode)
    verifiers = {r["verifier"] for r in rows["verify"]["rows"]}
    assert {"greedy", "token", "block", "spectr", "gbv"} <= verifiers
    assert {"specinfer (i.i.d.)", "specinfer (w/o replacement)"} <= verifiers
    spec = rows["speculative"]["rows"]
    assert {r["temperature"] for r in spec} == {0.0, 1.0}
    methods = {"autoregressive", "n-gram L=4", "head L=3"}
    methods |= {"n-gram adaptive (0, 4)", "head adaptive (0, 3)"}  # widths=auto, as the CLI
    assert {r["method"] for r in spec} == methods
    adaptive = [r for r in spec if "adaptive" in r["method"]]
    assert all(r["width_steps"] for r in adaptive), adaptive  # steps per width reported
    # Exact at temperature 0: every speculative method emits the autoregressive tokens.
    assert all(r["same_as_ar"] for r in spec + rows["ssd"]["rows"] if r["temperature"] == 0)
    assert {r["method"] for r in rows["ssd"]["rows"]} >= {"plain speculation", "SSD fused"}

    text = md.read_text(encoding="utf-8")
    for title in SECTIONS.values():
        assert f"## {title}" in text
    assert "**error**" not in text and "--quick" in text


def test_decode_models_picks_and_orders_the_decode_sections_models():
    """``--decode_models``: a short lease measures the Llama-3-8B shape first."""
    sizes = dataclasses.replace(QUICK, decode_models=("llama8b", "smollm2_fp32"))
    labels = [label for label, _, _ in decode_models(Bench(sizes, None, ""))]
    assert labels == ["Llama-3-8B shape bf16 (tiny stand-in)", "SmolLM2-135M fp32"]
