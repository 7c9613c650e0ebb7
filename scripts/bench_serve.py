r"""Serving under load: ``python -m specjax.serve`` with speculation on and off (a request's
``"speculative": false``), next to ``transformers serve --continuous-batching`` on the same model.

Held-out chat prompts (MT-bench first turns, never used in training, and bench_peers' three),
sent streamed, greedy, at most ``--max_tokens`` new tokens, ``--requests`` of them (the prompts
in turn) at each concurrency. The servers run side by side; at each concurrency every system
gets an untimed pass, then ``--rounds`` rounds of one timed pass each, in an order that turns
each round (the median round is reported), so that a slower minute of the machine falls on all
of them. Per system and
concurrency: generated tokens per second (all completion tokens / the wall time of all
requests), time to first token and inter-token latency (per request: the time from its first text
to its last over its tokens after the first), p50 and p99 over the requests. SmolLM2 for
transformers: the GGUF dequantized to an fp32 Hugging Face directory, as in bench_peers. Run from
the repo root:

  python scripts/bench_serve.py --concurrency=1,4,16 --requests=32 --output=/tmp/bench_serve.md

Smoke run: ``--quick`` (one prompt, concurrency 1, 8 tokens, specjax alone).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # (transformers serve: the local directory only)

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
from absl import app, flags
from benchlib import serve_load
from benchlib.chat_prompts import CHATS

from specjax.train.prompts import mtbench_questions

ROOT = pathlib.Path(__file__).resolve().parents[1]
SYSTEMS = ("specjax", "specjax_ar", "transformers")

_CONFIG = flags.DEFINE_string("config", "configs/smollm2.py", "specjax's decode config file.")
_SYSTEMS = flags.DEFINE_list("systems", list(SYSTEMS), f"Of {', '.join(SYSTEMS)}.")
_CONCURRENCY = flags.DEFINE_list("concurrency", ["1", "4", "16"], "Requests in flight at once.")
_REQUESTS = flags.DEFINE_integer("requests", 32, "Requests per concurrency (prompts in turn).")
_MTBENCH = flags.DEFINE_integer("mtbench", 20, "MT-bench first turns among the prompts.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 128, "New tokens per request at most.")
_SLOTS = flags.DEFINE_integer("slots", 16, "specjax serve's slots (rows decoded together).")
_THREADS = flags.DEFINE_integer("threads", 2, "transformers serve's torch threads (OMP).")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the Markdown report to this file.")
_SERVE_FLAGS = flags.DEFINE_list(
    "serve_flags", [], "More --config.key=value flags for specjax serve (e.g. the verifier)."
)
_ROUNDS = flags.DEFINE_integer("rounds", 1, "Timed rounds per level (the median is reported).")
_QUICK = flags.DEFINE_bool("quick", False, "Smoke run (flags given explicitly still win).")

QUICK = dict(systems=["specjax"], concurrency=["1"], requests=1, mtbench=0, max_tokens=8)


def value(name: str):
    return benchlib.quick_value(name, QUICK)


def prompts() -> list[str]:
    """The held-out chat prompts: MT-bench first turns, then bench_peers' chats."""
    mt = mtbench_questions()[: value("mtbench")] if value("mtbench") else []
    out = [q["turns"][0] for q in mt] + list(CHATS.values())
    return out[:1] if _QUICK.value else out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(command: list[str], port: int, env: dict | None = None, timeout: float = 1800.0):
    """Runs a server process until the block ends; yields once ``/health`` answers 200."""
    log = tempfile.TemporaryFile("w+")
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log, env=env)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                log.seek(0)
                sys.exit(f"error: {command[0]} exited {process.returncode}:\n{log.read()[-3000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            if time.monotonic() > deadline:
                sys.exit(f"error: {command[0]} did not answer /health in {timeout:.0f} s")
            time.sleep(1.0)
        yield
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def specjax_server(port: int):
    command = [sys.executable, "-m", "specjax.serve", "--config", _CONFIG.value]
    command += [f"--config.port={port}", f"--config.slots={_SLOTS.value}", "--config.temperature=0"]
    command += [f"--config.max_new_tokens={value('max_tokens')}", "--config.served_model_name=m"]
    command += _SERVE_FLAGS.value
    return serving(command, port)


def hf_directory(tmp: pathlib.Path) -> pathlib.Path:
    """SmolLM2's GGUF dequantized into an fp32 Hugging Face directory, as bench_peers exports
    its models (the weights specjax serves; the tokenizer transformers reads from the GGUF)."""
    import transformers

    from specjax.models import fetch_smollm2, load_pretrained
    from specjax.models.safetensors_loader import save_safetensors

    path = fetch_smollm2()
    pre = load_pretrained(path)
    save_safetensors(tmp, pre.params, pre.config)
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        str(path.parent), gguf_file=path.name, local_files_only=True
    )
    tokenizer.save_pretrained(tmp)
    return tmp


def transformers_server(port: int, directory: pathlib.Path):
    command = ["transformers", "serve", str(directory), "--continuous-batching", "--port"]
    command += [str(port), "--device", "cpu", "--dtype", "float32"]
    env = {**os.environ, "OMP_NUM_THREADS": str(_THREADS.value)}
    return serving(command, port, env)


def sender(system: str, port: int, model: str) -> Callable[[str], serve_load.Timed]:
    """Sends one chat prompt to a running server, streamed, greedy (``specjax_ar``: with
    speculation off)."""
    extra = {"speculative": False} if system == "specjax_ar" else {}
    base = f"http://127.0.0.1:{port}/v1"

    def send(text: str) -> serve_load.Timed:
        body = dict(model=model, messages=[{"role": "user", "content": text}], **extra)
        body |= dict(max_tokens=value("max_tokens"), temperature=0.0)
        return serve_load.stream(base, body, chat=True)

    return send


def measure(senders: dict, texts: list[str]) -> dict[str, list[serve_load.Load]]:
    """Per system, its load at each concurrency: at each level every system's untimed pass
    (which compiles what its arrivals need), then ``--rounds`` rounds of one timed pass per
    system, in an order that turns each round, so that a slower minute of the machine falls on
    all of them; a level's figure is the round with the median throughput."""
    count = value("requests")
    items = list(itertools.islice(itertools.cycle(texts), count))
    out = {system: [] for system in senders}
    for c in [int(c) for c in value("concurrency")]:
        for send in senders.values():
            serve_load.load(send, items, c)
        timed = {system: [] for system in senders}
        order = list(senders)
        for r in range(_ROUNDS.value):
            for system in order[r % len(order) :] + order[: r % len(order)]:
                timed[system].append(serve_load.load(senders[system], items, c))
                benchlib.log(f"{system} c={c}: {timed[system][-1].tokens_per_s:.1f} tok/s")
        for system, loads in timed.items():
            out[system].append(sorted(loads, key=lambda x: x.tokens_per_s)[len(loads) // 2])
    return out


def row(system: str, result: serve_load.Load) -> list:
    ms = lambda s: benchlib.fmt(None if s is None else 1000 * s, ".1f")
    return [
        system,
        result.concurrency,
        len(result.requests),
        f"{result.tokens_per_s:.1f}",
        ms(result.ttft(50)),
        ms(result.ttft(99)),
        ms(result.itl(50)),
        ms(result.itl(99)),
    ]


NAMES = {
    "specjax": "specjax serve (speculative)",
    "specjax_ar": 'specjax serve ("speculative": false)',
    "transformers": "transformers serve --continuous-batching",
}


def main(argv):
    del argv
    systems = value("systems")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise app.UsageError(f"--systems takes {', '.join(SYSTEMS)}; got {sorted(unknown)}")
    texts = prompts()
    t0, load = time.perf_counter(), os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        senders = {}
        if any(s.startswith("specjax") for s in systems):
            port = free_port()
            stack.enter_context(specjax_server(port))
            senders |= {s: sender(s, port, "m") for s in systems if s.startswith("specjax")}
        if "transformers" in systems:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            directory = hf_directory(pathlib.Path(tmp))
            port = free_port()
            stack.enter_context(transformers_server(port, directory))
            senders["transformers"] = sender("transformers", port, str(directory))
        results = measure(senders, texts)
    rows = [row(NAMES[system], r) for system, loads in results.items() for r in loads]
    header = ["system", "concurrency", "requests", "gen tok/s"]
    header += ["TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms"]
    report = "\n\n".join(
        [
            f"`{benchlib.command()}` on {benchlib.machine(verbose=True)}; "
            f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; config {_CONFIG.value}; "
            f"{len(texts)} prompts, greedy, at most {value('max_tokens')} new tokens, "
            f"{value('requests')} requests per concurrency; total {time.perf_counter() - t0:.0f} "
            f"s; 1-min load average {load:.1f} before, {os.getloadavg()[0]:.1f} after.",
            benchlib.table(header, rows, left=1),
        ]
    )
    benchlib.write_report(report, _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
