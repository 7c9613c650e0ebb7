"""Kernels per step from a ``jax.profiler`` trace: the GPU's kernel events over a few decode
steps, read from the trace's JSON (``*.trace.json.gz``, the events Perfetto shows).

XLA:GPU runs op by op while profiling unless told otherwise
(``--xla_enable_command_buffers_during_profiling``), so the trace shows every kernel a step
launches, not the CUDA graphs it replays outside a trace.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import jax

_COPIES = ("memcpy", "memset")


def device_events(trace: dict) -> dict[str, float]:
    """Kernels and copies in a Chrome/Perfetto trace's events on GPU devices: ``kernels``,
    ``kernel_ms`` (their summed duration), ``copies`` (memcpy/memset), ``gpu_processes`` and
    ``lines`` (each GPU line's name and its complete events, counted or not: to check).

    Only the GPU processes' stream lines count (threads named ``Stream ...``, where the
    profiler puts each kernel once; its derived lines, e.g. ``XLA Ops``, repeat them); a GPU
    process without such lines counts all its complete (``X``) events.
    """
    events = trace.get("traceEvents", [])
    names = {}  # (pid, tid or None) -> name
    for e in events:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            names[e.get("pid"), e.get("tid")] = str(e.get("args", {}).get("name", ""))
    gpus = {pid for (pid, tid), n in names.items() if tid is None and "GPU" in n.upper()}
    streams = {
        (pid, tid) for (pid, tid), n in names.items() if pid in gpus and n.startswith("Stream")
    }
    with_streams = {pid for pid, _ in streams}
    kernels = copies = 0
    kernel_us = 0.0
    lines: dict[str, int] = {}
    for e in events:
        pid = e.get("pid")
        if e.get("ph") != "X" or pid not in gpus:
            continue
        line = names.get((pid, e.get("tid")), str(e.get("tid")))
        lines[line] = lines.get(line, 0) + 1
        if pid in with_streams and (pid, e.get("tid")) not in streams:
            continue
        if str(e.get("name", "")).lower().startswith(_COPIES):
            copies += 1
        else:
            kernels += 1
            kernel_us += float(e.get("dur", 0.0))
    return dict(
        kernels=kernels,
        kernel_ms=kernel_us / 1e3,
        copies=copies,
        gpu_processes=len(gpus),
        lines=", ".join(f"{k}: {v}" for k, v in sorted(lines.items())),
    )


def traced(run: Callable[[], object]) -> dict[str, float]:
    """:func:`device_events` of one profiled call of ``run`` (its results waited for)."""
    with tempfile.TemporaryDirectory(prefix="bench_trace_") as tmp:
        with jax.profiler.trace(tmp):
            jax.block_until_ready(run())
        found = sorted(Path(tmp).rglob("*.trace.json.gz"))
        if not found:
            raise RuntimeError(f"the profiler wrote no *.trace.json.gz under {tmp}")
        with gzip.open(found[-1], "rt", encoding="utf-8") as f:
            return device_events(json.load(f))
