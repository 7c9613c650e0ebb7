"""What every ``scripts/bench_*.py`` report states about where and on what code it ran."""

from __future__ import annotations

import hashlib
import os
import pathlib
import platform
import statistics
import time

import jax
import jax.numpy as jnp


def cpu_name() -> str:
    """The CPU model from ``/proc/cpuinfo`` with its logical CPU count, else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    if names:
        return f"{names[0]} ×{len(names)} logical CPUs"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"


def machine(verbose: bool = False) -> str:
    """CPU, (with ``verbose``) OS and Python, and the JAX backend with its device kinds."""
    devices = ", ".join(sorted({d.device_kind for d in jax.devices()}))
    host = cpu_name()
    if verbose:
        host += f" ({platform.platform()}, Python {platform.python_version()})"
    return f"{host}; jax {jax.__version__} ({jax.default_backend()}: {devices})"


def source_digest(directory: str | pathlib.Path, recursive: bool = False) -> str:
    """Short sha256 of the ``*.py`` files under ``directory``: which code was measured."""
    directory = pathlib.Path(directory)
    digest = hashlib.sha256()
    paths = directory.rglob("*.py") if recursive else directory.glob("*.py")
    for path in sorted(paths):
        digest.update(str(path.relative_to(directory)).encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def timed(fn):
    """``(fn(), seconds it took)``."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def bandwidth(megabytes: int = 540, repeats: int = 10) -> float:
    """Memory bandwidth in bytes/s: a jitted ``jnp.sum`` over a float32 array of ``megabytes``
    (median of ``repeats`` calls after one that compiles)."""
    x = jnp.ones(megabytes * 10**6 // 4, jnp.float32)
    total = jax.jit(jnp.sum)
    total(x).block_until_ready()
    times = [timed(lambda: total(x).block_until_ready())[1] for _ in range(repeats)]
    return x.nbytes / statistics.median(times)


def fmt(x, spec: str) -> str:
    """``format(x, spec)``, or an em dash for None."""
    return "—" if x is None else format(x, spec)


def markdown(head: list[str], body: list[list[str]], left: int) -> str:
    """A Markdown table whose first ``left`` columns are left-aligned, the others right."""
    align = ["---"] * left + ["---:"] * (len(head) - left)
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [head, align, *body])
