"""``python -m specjax.decode``: runs the shipped configs, writes metrics, and fails with one
clear error line on bad input; Ctrl-C never leaves a half-written output file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import ml_collections
import numpy as np
import pytest

from specjax import config_files
from specjax.cli import decode as runner
from tests.test_sharding import free_port

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "specjax.decode", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load_config(name: str) -> ml_collections.ConfigDict:
    return config_files.load_config(ROOT / "configs" / f"{name}.py")


@pytest.mark.slow  # (the CLI's greedy equality: test_ssd's mode=ssd run; the default config run)
def test_tiny_random_greedy_matches_autoregressive_and_writes_metrics(tmp_path):
    metrics, prompts = tmp_path / "m.json", tmp_path / "prompts.txt"
    prompts.write_text("Hello\nA longer second prompt\n")  # two rows: a batch job
    out = cli(
        "--config",
        "configs/tiny_random.py",
        "--config.temperature=0",
        "--config.compare_autoregressive=True",
        "--config.verifier=gbv",
        "--config.num_paths=2",
        "--config.batch_size=2",
        f"--config.prompts_file={prompts}",
        f"--config.metrics_json={metrics}",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "greedy output == autoregressive output: yes" in out.stdout
    record = json.loads(metrics.read_text())
    for key in (
        "block_efficiency",
        "acceptance_rate",
        "per_position_acceptance",
        "accepted_length_histogram",
        "tokens_per_second",
        "speedup",
        "tokens",
    ):
        assert key in record, key
    assert len(record["tokens"]) == 2 and len(record["tokens"][0]) == 24
    assert record["greedy_matches_autoregressive"] is True
    umask = os.umask(0o022)
    os.umask(umask)
    assert metrics.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() makes it, not 0600


def test_shakespeare_default_config_runs():
    out = cli("--config", "configs/shakespeare.py", "--config.max_new_tokens=24")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("--- row 0 ---\nROMEO:\n")
    assert "block efficiency" in out.stdout


def test_bad_input_exit_status_and_stderr_contract():
    """The one end-to-end error check (every case runs in-process in test_cli_checks.py): a
    typo in an override is exit status 1 and exactly one ``error:`` line on stderr."""
    out = cli("--config", "configs/tiny_random.py", "--config.temprature=0")
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "'temprature'" in lines[0], lines


class _Interrupting:
    """A stdout that raises KeyboardInterrupt after a few writes (Ctrl-C mid-stream)."""

    def __init__(self, after: int):
        self.after, self.text = after, []

    def write(self, s):
        self.text.append(s)
        if len(self.text) >= self.after:
            raise KeyboardInterrupt

    def flush(self):
        pass


@pytest.mark.slow  # (interrupts: test_sigterm_exits_143_and_writes_nothing, test_faults)
def test_interrupted_stream_leaves_previous_output_untouched(tmp_path):
    metrics, text = tmp_path / "m.json", tmp_path / "out.txt"
    metrics.write_text("previous run\n")
    cfg = load_config("tiny_random")
    cfg.stream = True
    cfg.max_new_tokens = 200
    cfg.metrics_json, cfg.output = str(metrics), str(text)
    with pytest.raises(KeyboardInterrupt):
        runner.run(cfg, out=_Interrupting(after=3))
    assert metrics.read_text() == "previous run\n"
    assert not text.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]  # no temporary files left


@pytest.mark.slow
def test_ctrl_c_exits_130_and_writes_nothing(tmp_path):
    metrics = tmp_path / "m.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specjax.decode",
            "--config",
            "configs/shakespeare.py",  # a few ms per step: about a second of streaming
            "--config.stream=True",
            "--config.max_new_tokens=900",
            f"--config.metrics_json={metrics}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    proc.stdout.read(1)  # streaming has started
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:  # the run beat the signal: nothing to check
        pytest.skip("generation finished before the interrupt")
    assert proc.returncode == 130, err
    assert b"interrupted" in err
    assert not metrics.exists() and list(tmp_path.iterdir()) == []


def _decode_then_signal(tmp_path, delay: float, signum: int):
    """Starts a long streaming decode, sends ``signum`` after ``delay`` seconds; returns
    (exit status, stderr)."""
    metrics, text = tmp_path / "m.json", tmp_path / "out.txt"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specjax.decode",
            "--config",
            "configs/shakespeare.py",
            "--config.stream=True",
            "--config.batch_size=4",
            "--config.max_new_tokens=900",
            f"--config.metrics_json={metrics}",
            f"--config.output={text}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signum)
    else:  # the run ended before the signal: nothing to check
        pytest.skip(f"the decode finished within {delay:.1f} s, before the signal")
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode()


def test_sigterm_exits_143_and_writes_nothing(tmp_path):
    code, err = _decode_then_signal(tmp_path, 3.0, signal.SIGTERM)
    assert code == 143, err
    assert err.strip().splitlines() == ["interrupted: no output file was written"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_twenty_interrupts_at_random_moments_exit_cleanly(tmp_path):
    """SIGINT anywhere from start-up to the middle of the decode: always exit 130, one line,
    no file (it used to end in a segfault, exit 139, a few seconds in)."""
    rng = np.random.default_rng(0)
    for i, delay in enumerate(rng.uniform(0.2, 6.0, size=20)):  # the decode takes about 10 s
        where = tmp_path / str(i)
        where.mkdir()
        code, err = _decode_then_signal(where, float(delay), signal.SIGINT)
        assert code == 130, (delay, code, err[-2000:])
        assert "interrupted: no output file was written" in err, err
        assert "Traceback" not in err and "Segmentation" not in err, err
        assert list(where.iterdir()) == [], delay


def test_a_peer_that_never_starts_is_one_error_within_the_timeout():
    start = time.monotonic()
    out = cli(
        "--config",
        "configs/tiny_random.py",
        f"--config.coordinator_address=127.0.0.1:{free_port()}",
        "--config.num_processes=2",
        "--config.process_id=1",
        "--config.init_timeout=3",
        timeout=120,
    )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "coordinator (process 0)" in lines[0], out.stderr
    assert time.monotonic() - start < 60


def main_after(monkeypatch, capsys, run_checked) -> tuple[int, str]:
    """``(exit status, stderr)`` of the CLI's ``main`` with ``run_checked`` as the run (signal
    handlers left alone, ``os._exit`` turned into SystemExit)."""
    from specjax.cli import interrupts

    def exit_now(code):
        raise SystemExit(code)

    monkeypatch.setattr(interrupts, "RECEIVED", [])
    monkeypatch.setattr(interrupts, "handle_signals", lambda: None)
    monkeypatch.setattr(runner, "run_checked", run_checked)
    monkeypatch.setattr(runner.os, "_exit", exit_now)
    monkeypatch.setattr(runner.signal, "signal", lambda *a: None)
    with pytest.raises(SystemExit) as exit_info:
        runner.main(load_config("tiny_random"))
    return exit_info.value.code, capsys.readouterr().err


def test_an_error_after_an_interrupt_is_reported_as_the_interrupt(monkeypatch, capsys):
    """Ctrl-C inside a library's threads can come back as an error of its own (orbax restoring
    a checkpoint said "corrupt ... save it again" in 2 of 83 runs): after a signal, any error is
    the interrupt (exit 130, one line), never advice to delete a good checkpoint."""
    from specjax.cli import interrupts

    def restore_hit_by_ctrl_c(cfg):
        interrupts.RECEIVED.append(signal.SIGINT)  # the handler ran in the main thread...
        raise ValueError("ck: the params could not be restored; the checkpoint is corrupt")

    code, err = main_after(monkeypatch, capsys, restore_hit_by_ctrl_c)
    assert code == 130
    assert err.strip() == "interrupted: no output file was written" and "corrupt" not in err


def test_an_interrupt_a_library_swallowed_is_still_reported(monkeypatch, capsys):
    """One Ctrl-C in 83 was lost: the run finished with exit 0. Now the finished run still exits
    130 with one line, which says every output is complete."""
    from specjax.cli import interrupts

    def run_that_swallows_ctrl_c(cfg):
        interrupts.RECEIVED.append(signal.SIGINT)  # taken, then caught inside a library

    code, err = main_after(monkeypatch, capsys, run_that_swallows_ctrl_c)
    assert code == 130
    assert err.strip() == "interrupted after the run finished: every output is complete"


def test_a_signal_after_the_outputs_is_one_line_not_a_silent_exit():
    """A signal during the teardown after a finished run used to end with exit 130 and no word."""
    code = (
        "import os, signal, time\n"
        "from specjax.cli import interrupts\n"
        "interrupts.outputs_complete()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(30)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 143
    assert out.stderr.strip() == "interrupted after the run finished: every output is complete"


def test_a_late_checkpoint_read_callback_prints_no_traceback(capsys):
    """tensorstore completes an orbax read's future on the event loop ``asyncio.run`` already
    closed; Python printed it as an ignored "RuntimeError: Event loop is closed" traceback (seen
    after runs, and after "interrupted"). The CLI's unraisable hook drops exactly that one."""
    from specjax.cli import interrupts

    def hook_args(err):  # a real sys.UnraisableHookArgs, from an exception in __del__
        class Raises:
            def __del__(self):
                raise err

        captured, before = [], sys.unraisablehook
        sys.unraisablehook = captured.append
        try:
            Raises()
        finally:
            sys.unraisablehook = before
        return captured[0]

    interrupts.resend_swallowed(hook_args(RuntimeError("Event loop is closed")))
    assert capsys.readouterr().err == ""
    interrupts.resend_swallowed(hook_args(RuntimeError("something else")))
    assert "something else" in capsys.readouterr().err
