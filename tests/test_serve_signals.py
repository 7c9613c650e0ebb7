"""``python -m specjax.serve`` as a process: SIGTERM stops admitting (503), lets the request in
flight finish, and exits 0; a bad key is one error line; a mesh is refused."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from tests.serve_fixtures import call, sse_events

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_drains_the_request_in_flight_and_exits_0():
    # The tiniest server: no draft, one slot, one step per chunk, long enough a stream (800
    # steps, each a look at the rows) that it is still in flight while the test asks.
    port = _free_port()
    command = [sys.executable, "-m", "specjax.serve", "--config", "configs/tiny_random.py"]
    command += [f"--config.port={port}", "--config.temperature=0", "--config.drafter=none"]
    command += ["--config.max_new_tokens=800", "--config.chunk=1", "--config.slots=1"]
    command += ["--config.prompt_buckets=8", "--config.batch_buckets=1"]
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if call(port, "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        answer = {}
        body = dict(model="random:0", prompt="drain", stream=True)
        streamed = threading.Thread(
            target=lambda: answer.update(r=call(port, "/v1/completions", body))
        )
        streamed.start()
        while "r" not in answer and time.monotonic() < deadline:  # until it decodes
            if "specjax_busy_slots 1.0" in call(port, "/metrics")[2]:
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        while call(port, "/health")[0] == 200 and time.monotonic() < deadline:
            time.sleep(0.01)  # (until the signal is handled)
        in_flight = "r" not in answer
        late = call(port, "/v1/completions", dict(model="random:0", prompt="late"))
        streamed.join(60)
        assert process.wait(60) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
    assert in_flight  # the signal came while the stream ran
    status, _, text = answer["r"]
    events = sse_events(text)
    assert status == 200 and events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert late[0] == 503, late


def test_a_bad_serve_key_is_one_error_line():
    command = [sys.executable, "-m", "specjax.serve", "--config", "configs/tiny_random.py"]
    run = subprocess.run(
        [*command, "--config.port=-5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert run.returncode == 1 and run.stderr.strip().startswith("error:"), run.stderr
    assert "port" in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_a_mesh_is_refused_before_any_model_loads():
    from specjax.cli.serve import build_server
    from specjax.config_files import load_config

    cfg = load_config(ROOT / "configs/tiny_random.py")
    with cfg.unlocked():
        cfg.mesh_shape = "2,1"
    with pytest.raises(ValueError, match="one device"):
        build_server(cfg)
