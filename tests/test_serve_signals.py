"""``python -m specjax.serve`` as a process: SIGTERM stops admitting (503), lets the request in
flight finish, and exits 0; a bad key is one error line."""

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
    port = _free_port()
    command = [sys.executable, "-m", "specjax.serve", "--config", "configs/tiny_random.py"]
    command += [f"--config.port={port}", "--config.temperature=0", "--config.widths=fixed"]
    command += ["--config.max_new_tokens=200", "--config.chunk=2", "--config.seed=3"]
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
        body = dict(model="random:0", prompt="drain", max_tokens=200, stream=True)
        streamed = threading.Thread(
            target=lambda: answer.update(r=call(port, "/v1/completions", body))
        )
        streamed.start()
        while "r" not in answer and time.monotonic() < deadline:  # until it decodes
            text = call(port, "/metrics")[2]
            if "specjax_busy_slots 1.0" in text:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        late = call(port, "/v1/completions", dict(model="random:0", prompt="late"))
        streamed.join(60)
        assert process.wait(60) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
    status, _, text = answer["r"]
    events = sse_events(text)
    assert status == 200 and events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert late[0] == 503, late


def test_a_bad_serve_key_is_one_error_line():
    command = [sys.executable, "-m", "specjax.serve", "--config", "configs/tiny_random.py"]
    for bad, words in (("--config.port=-5", "port"), ("--config.mesh_shape=2,1", "one device")):
        run = subprocess.run(
            [*command, bad],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        assert run.returncode == 1 and run.stderr.strip().startswith("error:"), run.stderr
        assert words in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
