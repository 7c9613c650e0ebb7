"""Compiling once: shape buckets (padding never changes the output), programs reused across
prompt lengths and batch sizes, the persistent compilation cache across CLI runs, and timings
reported apart (compile, time to first token, decode tokens/s)."""

from __future__ import annotations

import errno
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.compilation_cache.compilation_cache import reset_cache

from specjax.decode import EXACT, DecodeConfig, ShapeBuckets, compile_cache, generate
from specjax.decode.buckets import parse_sizes, round_up
from specjax.decode.seams import PROGRAMS
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


@pytest.mark.slow  # ~10 s per temperature; the buckets' programs are counted in the default tier
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_padding_never_changes_the_output(models, temperature):
    target, draft = models
    params = SamplingParams(temperature)
    cfg = DecodeConfig("block", params, max_new_tokens=12)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=params)
    exact = generate(target, PROMPTS, cfg, drafter, seed=5, buckets=EXACT)
    padded = generate(target, PROMPTS, cfg, drafter, seed=5)  # batch 3 -> 4, prompts -> 64
    assert padded.tokens == exact.tokens
    assert padded.metrics.generated_tokens == exact.metrics.generated_tokens == 36
    assert padded.metrics.target_forwards == exact.metrics.target_forwards


def test_prompts_of_four_lengths_compile_two_programs(models):
    target, draft = models
    cfg = DecodeConfig("block", GREEDY, max_new_tokens=6)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    before = PROGRAMS.compiled
    runs = [generate(target, [p], cfg, drafter) for p in ([1] * 7, [2] * 8, [3] * 12, [4] * 42)]
    runs.append(generate(target, [[1] * 7], cfg, drafter))
    assert PROGRAMS.compiled - before <= 2  # one prefill and one decode program
    assert sum(r.programs_compiled for r in runs) <= 2
    assert runs[-1].programs_compiled == 0 and runs[-1].compile_seconds < 1.0
    batches = [generate(target, PROMPTS[:n], cfg, drafter) for n in (3, 4)]  # both pad to 4
    assert batches[1].programs_compiled == 0


@pytest.mark.slow  # ~5 s: default-tier time
def test_metrics_report_compile_first_token_and_decode_rate_apart(models):
    target, draft = models
    cfg = DecodeConfig("block", GREEDY, max_new_tokens=10)
    m = generate(
        target, PROMPTS, cfg, ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    ).metrics
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


@pytest.mark.slow
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


def test_an_unusable_auto_cache_warns_once_and_runs_without_it(tmp_path, monkeypatch, capsys):
    """``auto`` whose directory cannot be made (here a file sits where the home cache would go,
    as with an unwritable HOME) is one warning on stderr and no cache; an explicit directory
    there stays an error (this used to fail the README's plain command)."""
    from ml_collections import ConfigDict

    from specjax.cli import validate
    from specjax.cli.checks import ConfigError

    blocker = tmp_path / "home"
    blocker.write_text("")
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    monkeypatch.setenv("SPECJAX_CACHE", str(blocker / "specjax"))
    before = jax.config.jax_compilation_cache_dir
    assert compile_cache.configure("auto") is None
    assert compile_cache.configure("auto") is None
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: compilation cache"), lines
    assert "running without a compilation cache" in lines[0], lines
    assert jax.config.jax_compilation_cache_dir == before
    validate.compilation_cache(ConfigDict({"compilation_cache": "auto"}))
    explicit = str(blocker / "xla")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        compile_cache.configure(explicit)
    with pytest.raises(ConfigError, match=r"compilation_cache: .* is a file, not a directory"):
        validate.compilation_cache(ConfigDict({"compilation_cache": explicit}))


@pytest.fixture
def jax_cache_settings():
    """Restores JAX's cache directory and write threshold after a test that changes them."""
    saved = (
        jax.config.jax_compilation_cache_dir,
        jax.config.jax_persistent_cache_min_compile_time_secs,
    )
    yield
    jax.config.update("jax_compilation_cache_dir", saved[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", saved[1])
    reset_cache()  # JAX opens the directory again on the next compile


def _compile(scale: float):
    """Compiles (and runs) a fresh jitted function: a new function object misses JAX's
    in-memory caches, so the persistent cache is asked; returns the cache hits it caused."""
    hits = []
    listener = lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None
    jax.monitoring.register_event_listener(listener)
    try:
        jax.jit(lambda x: jnp.sin(x) * scale + jnp.cos(x))(np.arange(5, dtype=np.float32))
    finally:
        jax.monitoring.unregister_event_listener(listener)
    return len(hits)


def _entries(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.glob("*-cache")}


def test_a_corrupt_cache_entry_is_replaced(tmp_path, jax_cache_settings):
    """JAX never overwrites an entry, so a garbled one made every later run warn and compile
    again; now the run that finds it compiles once and replaces it."""
    cache = compile_cache.enable(tmp_path / "xla", min_compile_seconds=0.0)
    assert _compile(3.0) == 0
    (name,) = _entries(cache)  # the one program compiled since the cache was enabled
    (cache / name).write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="Error reading persistent compilation cache"):
        assert _compile(3.0) == 0
    assert _entries(cache)[name] != b"garbage"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the entry loads
        assert _compile(3.0) == 1


def test_a_read_only_cache_is_read(tmp_path, monkeypatch, jax_cache_settings, capsys):
    """A pre-warmed cache on a read-only file system (simulated: every write into it fails, as
    with EROFS; root writes anywhere otherwise) is used for reading, not refused, and nothing
    is written to it."""
    cache = compile_cache.enable(tmp_path / "warm", min_compile_seconds=0.0)
    _compile(5.0)
    warm = _entries(cache)
    real_write = Path.write_bytes

    def write_bytes(path, data):
        if Path(path).parent == cache:
            raise PermissionError(errno.EROFS, "Read-only file system", str(path))
        return real_write(path, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    assert compile_cache.enable(cache) == cache
    assert "is read-only" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither a failed read nor a failed write
        assert _compile(5.0) == 1  # loaded from the read-only cache
        assert _compile(7.0) == 0  # compiled, not written
    assert _entries(cache) == warm
