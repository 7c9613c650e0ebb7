"""Compiling once: shape buckets (padding never changes the output), programs reused across
prompt lengths and batch sizes, the persistent compilation cache across CLI runs, and timings
reported apart (compile, time to first token, decode tokens/s)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specjax.decode import EXACT, PROGRAMS, DecodeConfig, ShapeBuckets, compile_cache, generate
from specjax.decode.buckets import parse_sizes, round_up
from specjax.drafters import ModelDrafter
from specjax.sampling import SamplingParams
from specjax.testing import pair

ROOT = Path(__file__).resolve().parents[1]
GREEDY = SamplingParams(0.0)
PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [12]]


@pytest.fixture(scope="module")
def models():
    return pair(sigma=0.05)


def test_round_up():
    assert round_up(3, (1, 2, 4, 8)) == 4
    assert round_up(8, (1, 2, 4, 8)) == 8
    assert round_up(9, (1, 2, 4, 8)) == 16  # past the largest: a multiple of it
    assert round_up(3, (1, 2, 4, 8), multiple_of=2) == 4
    assert round_up(1, (1, 2, 4, 8), multiple_of=2) == 2
    assert round_up(5, (1,)) == 5
    assert ShapeBuckets().prompt_length(70, limit=100) == 100  # never past the model's room
    assert parse_sizes("", "x") == (1,)
    with pytest.raises(ValueError, match="ascending"):
        ShapeBuckets(prompt=(64, 32))
    with pytest.raises(ValueError, match="comma-separated"):
        parse_sizes("64,abc", "prompt_buckets")


@pytest.mark.parametrize("temperature", [0.0, pytest.param(1.0, marks=pytest.mark.slow)])
def test_padding_never_changes_the_output(models, temperature):
    target, draft = models
    params = SamplingParams(temperature)
    cfg = DecodeConfig("block", params, max_new_tokens=12)
    drafter = ModelDrafter(draft, params, 1, 3)
    exact = generate(target, PROMPTS, cfg, drafter, seed=5, buckets=EXACT)
    padded = generate(target, PROMPTS, cfg, drafter, seed=5)  # batch 3 -> 4, prompts -> 64
    assert padded.tokens == exact.tokens
    assert padded.metrics.generated_tokens == exact.metrics.generated_tokens == 36
    assert padded.metrics.target_forwards == exact.metrics.target_forwards


def test_prompts_of_four_lengths_compile_two_programs(models):
    target, draft = models
    cfg = DecodeConfig("block", GREEDY, max_new_tokens=6)
    drafter = ModelDrafter(draft, GREEDY, 1, 3)
    before = PROGRAMS.compiled
    runs = [generate(target, [p], cfg, drafter) for p in ([1] * 7, [2] * 8, [3] * 12, [4] * 42)]
    runs.append(generate(target, [[1] * 7], cfg, drafter))
    assert PROGRAMS.compiled - before <= 2  # one prefill and one decode program
    assert sum(r.programs_compiled for r in runs) <= 2
    assert runs[-1].programs_compiled == 0 and runs[-1].compile_seconds < 1.0
    batches = [generate(target, PROMPTS[:n], cfg, drafter) for n in (3, 4)]  # both pad to 4
    assert batches[1].programs_compiled == 0


def test_metrics_report_compile_first_token_and_decode_rate_apart(models):
    target, draft = models
    cfg = DecodeConfig("block", GREEDY, max_new_tokens=10)
    m = generate(target, PROMPTS, cfg, ModelDrafter(draft, GREEDY, 1, 3)).metrics
    assert 0 < m.time_to_first_token < m.seconds
    assert m.decode_tokens > 0 and m.decode_tokens < m.generated_tokens
    assert math.isclose(m.decode_tokens_per_second, m.decode_tokens / m.decode_seconds)
    assert m.compile_seconds >= 0
    table = m.table()
    assert "time to first token" in table and "decode tokens/s" in table and "compile" in table


def test_compilation_cache_settings(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "env"))
    assert compile_cache.resolve("auto") == tmp_path / "env"
    assert compile_cache.resolve("off") is None
    assert compile_cache.resolve(str(tmp_path / "x")) == tmp_path / "x"
    monkeypatch.setenv(compile_cache.ENV, "off")
    assert compile_cache.resolve("auto") is None
    monkeypatch.delenv(compile_cache.ENV)
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "home"))
    assert compile_cache.resolve("auto") == tmp_path / "home" / "xla"
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="not writable"):
        compile_cache.enable(blocker / "cache")


def test_a_repeated_cli_run_loads_its_programs_from_the_cache(tmp_path):
    cache = tmp_path / "xla"
    env = dict(os.environ, SPECJAX_COMPILATION_CACHE=str(cache))
    compile_times = []
    for i in range(2):
        metrics = tmp_path / f"m{i}.json"
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "specjax.decode",
                "--config",
                "configs/tiny_random.py",
                f"--config.metrics_json={metrics}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        compile_times.append(json.loads(metrics.read_text())["compile_seconds"])
        if i == 0:
            assert any(cache.iterdir()), "the first run wrote no compiled program"
    assert compile_times[1] < 0.5 * compile_times[0], compile_times
