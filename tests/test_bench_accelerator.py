"""scripts/bench_accelerator.py --quick end to end: every section runs (tiny random models on
the CPU, about 2 minutes), the Markdown and JSON reports hold all of them without an error, and
the JSON's top level has every key figure (a number, or null with its reason)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
import sys
from pathlib import Path

import benchlib
import pytest
from benchlib import accelerator
from benchlib.accelerator import DEFAULT_SECTIONS, QUICK, SECTIONS
from benchlib.accelerator.figures import FIGURES
from benchlib.accelerator.kernels import decode_models
from benchlib.accelerator.shared import Bench
from benchlib.chat_prompts import CHATS, held_out

import specjax
from specjax.train.prompts import MTBENCH, cached_member

ROOT = Path(__file__).resolve().parents[1]


ISSUE_KEYS = (
    "copy_tb_s",
    "smollm2_step_ms_b1",
    "llama8b_step_floor_ratio_b1",
    "llama8b_step_floor_ratio_b8",
    "head_speedup_t0_median",
    "head_speedup_t1_median",
)
"""The key figures the accelerator issue asks the JSON's top level for."""


@pytest.mark.slow  # ~2-3 min on 2 cores: a benchmark's smoke run, like test_bench_serve's
def test_quick_run_writes_every_section(tmp_path):
    cmd = [sys.executable, "scripts/bench_accelerator.py", "--quick", f"--out_dir={tmp_path}"]
    cmd += [f"--sections={','.join(SECTIONS)}"]  # the default sections and the others
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
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
    assert rows["bandwidth"]["rows"][0]["loop_kept"] is True

    # The key figures at the top level: the issue's six measured in quick (the head is a
    # random one), int8 null with its reason until specjax has quantize_weights.
    assert set(FIGURES) <= set(report)
    for key in (*ISSUE_KEYS, "smollm2_ops_per_layer", "smollm2_step_per_call_ms_b1"):
        assert isinstance(report[key], int | float) and report[key] > 0, (key, report[key])
        assert f"{key}_reason" not in report, key
    for key in FIGURES:
        assert report[key] is not None or report[f"{key}_reason"], key
    assert report["copy_tb_s"] == pytest.approx(rows["bandwidth"]["rows"][0]["gb_s"] / 1e3)

    step = rows["step"]["rows"]
    default = step[0]
    assert (default["variant"], default["options"]) == ("default", "default")
    assert default["ms"] == report["smollm2_step_ms_b1"] and default["ops"] > 0
    assert {r["options"] for r in step} >= {
        "(one forward per host call)",
        "(model forward alone, fori_loop)",
        "(profiler trace, op by op)",
    }
    assert any("GPU only" in n for n in rows["step"]["notes"])  # variants skipped on the CPU
    llama = {r["batch"]: r for r in rows["llama8b"]["rows"] if r["variant"] == "default"}
    assert llama[1]["ratio"] == report["llama8b_step_floor_ratio_b1"]
    assert all(llama[b]["concatenate"] >= 0 and llama[b]["tokens_per_s"] > 0 for b in (1, 8))
    ops = {r["what"]: r for r in rows["ops"]["rows"] if r["variant"] == "default"}
    assert ops["per layer"]["total"] == report["smollm2_ops_per_layer"]
    assert "Operations per layer" in out.stdout and "Key figures:" in out.stdout

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


def test_default_sections_fit_a_lease_call():
    """The default sections are the issue's figures first, and their budgets (compiles
    included) fit the 9 minutes a 15-minute lease leaves one call."""
    assert DEFAULT_SECTIONS[:5] == ("versions", "bandwidth", "step", "llama8b", "speculative")
    assert set(DEFAULT_SECTIONS) <= set(SECTIONS)
    full = accelerator.FULL
    assert sum(full.budgets[name] for name in DEFAULT_SECTIONS) <= 9 * 60
    assert set(full.budgets) == set(SECTIONS) == set(QUICK.budgets)
    assert full.context + 1 + full.step_steps <= full.capacity  # the in-loop steps fit S


def test_held_out_prompts_read_mtbench_only_from_the_cache(tmp_path, monkeypatch):
    """The speculative section's prompts: MT-bench first turns where the cache has them (a
    lent machine reaches no network, so nothing is fetched), then the three chats."""
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path))
    prompts, note = held_out(20)
    assert list(prompts) == ["peers summarize", "peers copy", "peers poem"]
    assert "not in the cache" in note
    path = cached_member(MTBENCH)
    path.parent.mkdir(parents=True)
    rows = [
        dict(question_id=81 + i, category="writing", turns=[f"q{i}", "again"]) for i in range(3)
    ]
    path.write_text("\n".join(map(json.dumps, rows)) + "\n", encoding="utf-8")
    prompts, note = held_out(2, ("poem",))
    assert prompts == {"mt81 writing": "q0", "mt82 writing": "q1", "peers poem": CHATS["poem"]}
    assert note.startswith("3 held-out prompts")
