"""Batch jobs: continuous batching (a request's output is the same in any slot, batch size or
resume point), results streamed as JSONL records as prompts finish, resume after SIGKILL, torn
lines, error records, and the CLI keys."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from specjax import config_files
from specjax.cli import decode as runner
from specjax.cli import validate
from specjax.cli.app import error_line
from specjax.cli.checks import ConfigError
from specjax.cli.job_files import ResultsFile, format_progress
from specjax.cli.job_input import read_input
from specjax.decode import compile_cache, generate
from specjax.decode.batch_counts import Progress
from specjax.decode.batching import ContinuousBatch, Request

ROOT = Path(__file__).resolve().parents[1]
STOP = 243  # a token the tiny random target often emits: rows stop at different steps


def job_config(tmp_path: Path | None = None, temperature: float = 0.0, count: int = 24):
    """configs/tiny_random.py as a batch job of ``count`` prompts (1 .. 40 bytes) through 3
    slots (written to ``tmp_path``)."""
    cfg = config_files.load_config(ROOT / "configs" / "tiny_random.py")
    cfg.batch_size, cfg.temperature, cfg.max_new_tokens, cfg.progress = 3, temperature, 24, "off"
    cfg.stop_tokens = (STOP,)
    if tmp_path is not None:
        path = tmp_path / "in.jsonl"
        with path.open("w") as f:
            for i, text in enumerate(texts(count)):
                f.write(json.dumps({"id": f"p{i}", "prompt": text}) + "\n")
        cfg.input = str(path)
    return cfg


def texts(count: int, seed: int = 0) -> list[str]:
    """Prompts whose lengths vary 40x (1 .. 40 bytes)."""
    rng = np.random.default_rng(seed)
    lengths = [1, 40, *rng.integers(1, 41, size=count - 2)]
    return ["".join(chr(c) for c in rng.integers(97, 123, size=int(n))) for n in lengths]


@pytest.fixture(scope="module")
def job():
    """``temperature -> (target, drafter, DecodeConfig)`` exactly as the CLI builds them for
    :func:`job_config`, so the library tests and the CLI runs share compiled programs (also on
    disk, for the CLI subprocess)."""
    compile_cache.configure("auto")  # the test session's cache (tests/conftest.py)
    built = {}
    for temperature in (0.0, 1.0):
        cfg = job_config(temperature=temperature)
        cfg.input = "x"  # a batch job: at T > 0 it drafts a fixed width
        target, tokenizer, drafter, config = runner.build(cfg)
        built[temperature] = (target, drafter, config, tokenizer)
    return built


def requests(tokenizer, count: int, seed: int = 0) -> list[Request]:
    return [Request(f"p{i}", tokenizer.encode(t)) for i, t in enumerate(texts(count, seed))]


def by_id(engine: ContinuousBatch, reqs) -> dict:
    return {c.id: c for c in engine.run(reqs)}


def test_a_request_gives_the_same_tokens_in_any_batch_size_at_temperature_1(job):
    target, drafter, config, tokenizer = job[1.0]
    assert not config.widths  # a fixed width at T > 0
    reqs = requests(tokenizer, 10)
    outputs = {}
    for slots in (1, 3):
        engine = ContinuousBatch(target, drafter, config, slots=slots, seed=3)
        done = by_id(engine, reqs)
        assert sorted(done) == sorted(r.id for r in reqs)  # one completion per request
        outputs[slots] = [done[r.id].token_ids for r in reqs]
        assert engine.metrics.generated_tokens == sum(map(len, outputs[slots]))
    assert outputs[1] == outputs[3]
    # in another order, the same tokens per id; and another seed gives other samples
    shuffled = by_id(ContinuousBatch(target, drafter, config, slots=3, seed=3), reqs[::-1])
    assert [shuffled[r.id].token_ids for r in reqs] == outputs[3]
    other = by_id(ContinuousBatch(target, drafter, config, slots=3, seed=4), reqs)
    assert [other[r.id].token_ids for r in reqs] != outputs[3]


def test_rows_moved_to_fewer_or_more_slots_decode_on_unchanged(job):
    """A server's slots shrink to the rows in use and grow when requests come (Slots.resize):
    the moved rows' tokens at temperature 1 are those of an undisturbed run."""
    import collections

    from specjax.decode.batching import Slots

    target, drafter, config, tokenizer = job[1.0]
    reqs = requests(tokenizer, 5, seed=1)
    engine = ContinuousBatch(target, drafter, config, slots=4, seed=3, chunk=2)
    want = {r.id: by_id(engine, [r])[r.id].token_ids for r in reqs}
    slots = Slots(engine, engine._width(max(reqs, key=lambda r: len(r.prompt))), 4)
    slots.admit(collections.deque([(None, r) for r in reqs[:3]]))
    got, sizes = {}, []
    for turn in range(40):
        if turn == 1:  # 3 busy rows of 4 -> 3, then back to 4 with two more requests
            assert slots.busy == 3 and slots.resize(3) == {0: 0, 1: 1, 2: 2}
            slots.step(False)
            slots.resize(8)
            slots.admit(collections.deque([(None, r) for r in reqs[3:]]))
        if turn == 3 and slots.busy <= 2:
            slots.resize(2)
        sizes.append(slots.rows)
        slots.step(False)
        for (_, request), completion, _, _ in slots.harvest():
            got[request.id] = completion.token_ids
        if len(got) == len(reqs):
            break
    assert got == want
    assert 8 in sizes


def test_one_admission_prefills_each_prompt_bucket_apart_in_batch_bucket_calls(job, monkeypatch):
    """Prompts of mixed lengths admitted at once are prefilled by prompt bucket, shortest first,
    in batch-bucket sized calls (a short prompt is not padded to a long one's width), and each
    request's tokens at temperature 1 are those it gets alone."""
    import collections

    from specjax.decode.batching import Slots
    from specjax.decode.buckets import ShapeBuckets
    from specjax.decode.seams import PROGRAMS

    target, drafter, config, _ = job[1.0]
    buckets = ShapeBuckets(prompt=(8, 64), batch=(1, 2, 4))
    reqs = [Request(f"q{i}", list(range(1, n + 1))) for i, n in enumerate([30, 3, 5, 40, 6])]
    engine = ContinuousBatch(target, drafter, config, slots=5, seed=3, buckets=buckets)
    want = {r.id: by_id(engine, [r])[r.id].token_ids for r in reqs}
    calls, prefill = [], PROGRAMS.prefill_rows

    def spy(args, *rest, **kw):
        calls.append(args[2].shape[::-1])  # the prompts [n, width]: (width, n)
        return prefill(args, *rest, **kw)

    monkeypatch.setattr(PROGRAMS, "prefill_rows", spy)
    slots = Slots(engine, 64, 5)
    slots.admit(collections.deque([(None, r) for r in reqs]))
    assert calls == [(8, 2), (8, 1), (64, 2)]
    got = {}
    while slots.busy:
        slots.step(False)
        got |= {req.id: done.token_ids for (_, req), done, _, _ in slots.harvest()}
    assert got == want


@pytest.mark.slow  # (default tier: test_serve's 16 concurrent greedy requests == alone)
def test_greedy_batch_equals_the_prompts_decoded_as_one_batch(job):
    """Rows finish at different steps (stop tokens, lengths) and are refilled mid-run; the
    width controller is on (widths (0, L) at T = 0); a 100-token prompt makes the slots grow
    from the 64-token bucket to the 128 one while rows run."""
    target, drafter, config, tokenizer = job[0.0]
    assert config.widths
    reqs = requests(tokenizer, 7, seed=1)
    reqs.insert(2, Request("long", tokenizer.encode("x" * 60 + texts(2, seed=5)[1])))
    engine = ContinuousBatch(target, drafter, config, slots=3, seed=0)
    done = by_id(engine, reqs)
    alone = generate(target, [r.prompt for r in reqs], config, drafter).tokens  # one batch
    assert [done[r.id].token_ids for r in reqs] == alone
    for r, ids in zip(reqs, alone, strict=True):
        assert done[r.id].finish_reason == ("stop" if ids[-1] == STOP else "length")
    assert {done[r.id].finish_reason for r in reqs} == {"stop", "length"}
    assert 0 < engine.progress.utilization <= 1


def test_bad_requests_become_error_completions_and_the_others_finish(job):
    target, drafter, config, _ = job[0.0]
    too_long = [1] * target.config.max_seq_len
    reqs = [
        Request("ok", [104, 105]),
        Request("long", too_long),
        Request("empty", []),
        Request("text", "hello"),
        Request("outside", [256]),
        Request("floats", [1.0, 2.0]),
        Request("ok2", [120]),
        Request("ok3", [97, 98, 99]),
    ]
    # a billion slots: a run takes only the rows its requests need, never the slots it may
    # (three here: the programs of the slots=3 runs above)
    done = by_id(ContinuousBatch(target, drafter, config, slots=10**9), reqs)
    assert {k for k, c in done.items() if c.finish_reason == "error"} == {
        "long",
        "empty",
        "text",
        "outside",
        "floats",
    }
    assert "max_seq_len" in done["long"].error and "list of token ids" in done["text"].error
    assert done["ok"].token_ids and done["ok2"].token_ids and done["ok3"].token_ids
    with pytest.raises(ValueError, match="appears more than once"):
        list(ContinuousBatch(target, drafter, config).run([Request(1, [1]), Request(1, [2])]))


def test_adaptive_widths_are_refused_at_temperature_1_in_a_batch(job):
    target, drafter, config, _ = job[1.0]
    sampled = dataclasses.replace(config, widths=(0, drafter.draft_len))
    with pytest.raises(ValueError, match="fixed width"):
        ContinuousBatch(target, drafter, sampled)


# -- files ---------------------------------------------------------------------------------------


class _Bytes:
    """A byte-level tokenizer stand-in (what tiny_random's models read)."""

    chat_template = None

    def encode(self, text, add_special_tokens=True):
        return list(text.encode())


def test_input_formats_and_their_errors(tmp_path):
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(
        '{"id": "a", "prompt": "hi", "category": "kept"}\n\n'
        '{"id": 2, "messages": [{"role": "user", "content": "x"}]}\n'
        '{"id": "c"}\n{"id": "d", "prompt": ["no"]}\n'
    )
    items = read_input(jsonl, _Bytes(), chat=False)
    assert [i.id for i in items] == ["a", 2, "c", "d"]
    assert items[0].prompt == [104, 105] and not items[0].error
    assert "chat template" in items[1].error and "exactly one" in items[2].error
    assert "must be a string" in items[3].error
    text = tmp_path / "in.txt"
    text.write_text("one\n\nthree\\nlines\n")
    items = read_input(text, _Bytes(), chat=False)
    assert [(i.id, i.text) for i in items] == [(1, "one"), (3, "three\nlines")]
    for bad, message in [
        ('{"id": 1, "prompt": "a"}\n{"id": 1, "prompt": "b"}\n', "appears more than once"),
        ('{"prompt": "a"}\n', 'has no "id"'),
        ('{"id": 1, "prompt": "a", "temperature": 0.5}\n', "--config.temperature"),
        ('{"id": 1, "prompt": "a"}\n{"id": 2, oops\n', "line 2 is not JSON"),
    ]:
        jsonl.write_text(bad)
        with pytest.raises(ValueError, match=message):
            read_input(jsonl, _Bytes(), chat=False)


def test_results_file_refuses_to_overwrite_and_cuts_a_torn_last_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a", "text": "x"}\n{"id": 1, "text": "y"}\n{"id": "b", "te')
    with pytest.raises(ValueError, match="resume=True"):
        ResultsFile(path, resume=False)
    results = ResultsFile(path, resume=True)
    assert results.torn and results.has("a") and results.has(1)
    assert not results.has("1") and not results.has("b")  # 1 and "1" are different ids
    assert path.read_text() == '{"id": "a", "text": "x"}\n{"id": 1, "text": "y"}\n'
    results.append({"id": "b", "text": "z"})
    results.close()
    assert json.loads(path.read_text().splitlines()[-1]) == {"id": "b", "text": "z"}
    path.write_text('{"id": "a"}\nnot json\n{"id": "b"}\n')
    with pytest.raises(ValueError, match="line 2"):
        ResultsFile(path, resume=True)


def test_progress_line():
    p = Progress(total=200, finished=37, generated=1000, accepted=62, proposed=100, seconds=2.0)
    p.row_steps, p.slot_steps = 94, 100
    line = format_progress(p)
    assert line.startswith("[ 37/200]") and "500.0 tok/s" in line
    assert "acceptance 0.62" in line and "slots 94%" in line and "ETA 9s" in line


# -- the CLI: kill, resume ------------------------------------------------------------------------


def records(path: Path) -> dict:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    by = {r["id"]: r for r in lines}
    assert len(by) == len(lines), "an id was written twice"
    return by


@pytest.mark.parametrize("temperature", [pytest.param(0.0, marks=pytest.mark.slow), 1.0])
def test_a_job_killed_at_a_random_point_resumes_to_the_uninterrupted_records(tmp_path, temperature):
    cfg = job_config(tmp_path, temperature)
    whole = tmp_path / "whole.jsonl"
    cfg.results = str(whole)
    runner.run(cfg, out=io.StringIO())
    expected = records(whole)
    assert len(expected) == 24

    killed = tmp_path / "killed.jsonl"
    args = [f"--config.{k}={cfg[k]}" for k in ("input", "batch_size", "temperature")]
    args += ["--config.max_new_tokens=24", f"--config.stop_tokens=({STOP},)"]
    args += [f"--config.results={killed}", "--config.progress=off"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "specjax.decode", "--config", "configs/tiny_random.py", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    at = int(np.random.default_rng(int(time.time())).integers(1, 20))  # records before the kill
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if killed.exists() and killed.read_text().count("\n") >= at:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait(timeout=60)
    before = killed.read_text() if killed.exists() else ""
    if proc.returncode == 0:
        pytest.skip("the job finished before the kill")
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]
    with killed.open("a") as f:  # as if the kill had come in the middle of a write
        f.write('{"id": "p0", "text": "tor')

    cfg.results, cfg.resume = str(killed), True
    out = io.StringIO()
    runner.run(cfg, out=out)
    got = records(killed)
    assert sorted(got) == sorted(expected)
    for rid, record in expected.items():
        assert got[rid]["token_ids"] == record["token_ids"], rid
        assert got[rid]["finish_reason"] == record["finish_reason"]
    assert killed.read_text().startswith(before.rsplit("\n", 1)[0])  # nothing rewritten
    assert "already in" in out.getvalue()


def test_cli_batch_job_keys(tmp_path):
    cfg = job_config(tmp_path, 0.0, count=5)
    cfg.results = str(tmp_path / "r.jsonl")
    record = runner.run(cfg, out=io.StringIO())
    assert record["prompts"] == 5 and record["errors"] == 0 and len(record["tokens"]) == 5
    rows = records(Path(cfg.results))
    for r in rows.values():
        assert set(r) >= {"id", "text", "token_ids", "finish_reason", "prompt_tokens"}
        assert r["generated_tokens"] == len(r["token_ids"]) and r["target_forwards"] > 0
    with pytest.raises(ValueError, match="resume=True"):
        runner.run(cfg, out=io.StringIO())
    cfg.resume = True  # everything is there: nothing runs
    record = runner.run(cfg, out=io.StringIO())
    assert record["skipped"] == 5
    assert record["tokens"] == [rows[f"p{i}"]["token_ids"] for i in range(5)]
    cfg.output = cfg.input
    with pytest.raises(ValueError, match="overwrite"):
        runner.run(cfg, out=io.StringIO())


def test_an_interrupt_keeps_the_records_and_says_how_to_resume(tmp_path, monkeypatch):
    cfg = job_config(tmp_path, 0.0, count=6)
    cfg.results = str(tmp_path / "r.jsonl")
    real, calls = ResultsFile.append, []

    def append_then_interrupt(self, record):
        real(self, record)
        calls.append(record["id"])
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(ResultsFile, "append", append_then_interrupt)
    with pytest.raises(KeyboardInterrupt) as err:
        runner.run(cfg, out=io.StringIO())
    assert "resume=True" in err.value.note and "2 prompts" in err.value.note
    assert sorted(records(Path(cfg.results))) == sorted(calls)  # flushed, nothing torn


def test_a_full_disk_is_one_error_line(tmp_path):
    cfg = job_config(tmp_path, 0.0, count=3)
    cfg.results = "/dev/full"  # every write fails with ENOSPC
    with pytest.raises(RuntimeError) as err:
        runner.run(cfg, out=io.StringIO())
    line = error_line(err.value)
    assert "\n" not in line and "No space left on device" in line and "resume=True" in line


def test_a_failed_output_write_keeps_the_others_and_rows_stay_lines(tmp_path, monkeypatch):
    """``output`` on a full disk: ``metrics_json`` is still written and the error says so;
    completions holding newlines stay one line each."""
    from specjax.cli import job_files

    cfg = job_config(tmp_path, 0.0, count=3)
    cfg.output, cfg.metrics_json = str(tmp_path / "out.txt"), str(tmp_path / "m.json")
    runner.run(cfg, out=io.StringIO())
    lines = (tmp_path / "out.txt").read_text().split("\n")
    assert len(lines) == 4 and lines[-1] == ""  # three rows, whatever the texts hold
    unescape = {"n": "\n", "r": "\r", "\\": "\\"}
    texts_back = [re.sub(r"\\(.)", lambda m: unescape[m.group(1)], x) for x in lines]
    record = json.loads((tmp_path / "m.json").read_text())
    assert texts_back[:3] == record["text"]
    (tmp_path / "m.json").unlink()
    real = job_files.atomic_write

    def full_disk(path, text):
        if str(path) == cfg.output:
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(job_files, "atomic_write", full_disk)
    with pytest.raises(RuntimeError) as err:
        runner.run(cfg, out=io.StringIO())
    line = error_line(err.value)
    assert "output" in line and "No space left" in line and "metrics_json" in line
    assert (tmp_path / "m.json").exists()


def test_the_input_is_checked_before_any_model_loads(tmp_path):
    cfg = job_config(tmp_path, 0.0, count=3)
    Path(cfg.input).write_text('{"id": 1, "prompt": "a"}\n{"id": 2, oops\n')
    with pytest.raises(ConfigError, match=r"input .* line 2 is not JSON"):
        validate.check_decode(cfg)
    cfg.input, cfg.prompts_file = "", str(tmp_path / "empty.txt")
    Path(cfg.prompts_file).write_text("\n\n")
    with pytest.raises(ConfigError, match=r"prompts_file .* has no prompts"):
        validate.check_decode(cfg)


def test_a_job_whose_every_prompt_fails_is_an_error_and_resume_runs_them_again(tmp_path):
    cfg = job_config(tmp_path, 0.0, count=2)
    lines = [json.dumps({"id": f"p{i}", "prompt": "x" * 100}) for i in range(2)]
    Path(cfg.input).write_text("\n".join(lines) + "\n")
    cfg.results, cfg.max_new_tokens = str(tmp_path / "r.jsonl"), 1000  # 100 + 1000 > 1024
    with pytest.raises(ValueError, match=r"every prompt of the batch job failed .*resume=True"):
        runner.run(cfg, out=io.StringIO())
    assert {r["finish_reason"] for r in records(Path(cfg.results)).values()} == {"error"}
    cfg.max_new_tokens, cfg.resume = 24, True
    record = runner.run(cfg, out=io.StringIO())
    assert record["errors"] == 0 and record["skipped"] == 0
    lines = [json.loads(line) for line in Path(cfg.results).read_text().splitlines()]
    assert [r["finish_reason"] for r in lines[:2]] == ["error", "error"]
    assert {r["finish_reason"] for r in lines[2:]} <= {"stop", "length"} and len(lines) == 4
    assert ResultsFile(cfg.results, resume=True, write=False).finished("p0")  # the last counts
