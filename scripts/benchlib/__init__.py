"""What every ``scripts/bench_*.py`` shares: the machine and code a report ran on, timing, Markdown
tables, and the report's command line and file.

Scripts run with ``scripts/`` on ``sys.path`` (Python puts a script's folder there; pytest's
``pythonpath`` setting does the same for the tests) and ``import benchlib``. One benchmark's own
reports and plots live beside this module: ``benchlib.decode_pairs`` / ``decode_timing`` /
``decode_report`` (``bench_decode.py``), ``benchlib.verify_inputs`` / ``verify_report``
(``bench_verify.py``), ``benchlib.ngram_matches`` (``pinned_widths.py``),
``benchlib.width_policies`` (``--policies`` of the width scripts, and where a run's width costs
came from) and ``benchlib.plots`` (every PNG).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pathlib
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from absl import flags

from specjax.files import atomic_write

# ----------------------------------------------------------------------------- machine and code


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
    """Short sha256 of the ``*.py`` files under ``directory``: which code was measured.

    Raises:
      ValueError: ``directory`` holds no ``*.py`` file (a wrong path would give the digest of
        nothing, ``e3b0c44298fc``, which names no code).
    """
    directory = pathlib.Path(directory)
    digest = hashlib.sha256()
    paths = sorted(directory.rglob("*.py") if recursive else directory.glob("*.py"))
    if not paths:
        raise ValueError(f"no *.py files in {directory}: nothing to take the digest of")
    for path in paths:
        digest.update(str(path.relative_to(directory)).encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def bandwidth(megabytes: int = 540, repeats: int = 10) -> float:
    """Memory bandwidth in bytes/s: a jitted ``jnp.sum`` over a float32 array of ``megabytes``
    (median of ``repeats`` calls after one that compiles)."""
    x = jnp.ones(megabytes * 10**6 // 4, jnp.float32)
    total = jax.jit(jnp.sum)
    total(x).block_until_ready()
    times = [timed(lambda: total(x).block_until_ready())[1] for _ in range(repeats)]
    return x.nbytes / statistics.median(times)


# ----------------------------------------------------------------------------- the running script


def script() -> str:
    """The running script's file name, e.g. ``bench_decode.py``."""
    return pathlib.Path(sys.argv[0]).name


def log(msg: str) -> None:
    """A progress line on stderr, tagged with the script's name."""
    print(f"[{pathlib.Path(script()).stem}] {msg}", file=sys.stderr, flush=True)


def command() -> str:
    """The command line that reproduces this run, from the repository root."""
    return " ".join(["python", f"scripts/{script()}", *sys.argv[1:]])


def quick_value(name: str, quick: dict[str, Any]):
    """Flag ``name``'s value, or its ``quick`` value under ``--quick`` unless the flag was given
    on the command line."""
    flag = flags.FLAGS[name]
    return quick[name] if flags.FLAGS.quick and name in quick and not flag.present else flag.value


def write_report(text: str, path: str | None) -> None:
    """Prints the report and, when ``path`` is given, writes it there."""
    print(text)
    if path:
        atomic_write(path, text)
        log(f"wrote {path}")


# ----------------------------------------------------------------------------- timing


def release_programs() -> None:
    """Drops every compiled program (specjax's and jax's caches): XLA:CPU keeps each live
    executable's machine code, and a long run of many programs runs out of it (a segfault)."""
    from specjax.decode.seams import PROGRAMS

    PROGRAMS.clear()
    jax.clear_caches()


def timed(fn):
    """``(fn(), seconds it took)``."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def wall(fn: Callable[[], Any]) -> Callable[[], float]:
    """``fn`` made to return its wall time (results waited for)."""
    return lambda: timed(lambda: jax.block_until_ready(fn()))[1]


def interleaved(calls: dict[Any, tuple[Callable[[], float], int]], rounds: int) -> dict:
    """Seconds returned by ``name: (fn, calls per round)``, the names called in turn each round."""
    samples: dict[Any, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, (fn, count) in calls.items():
            samples[name] += [fn() for _ in range(count)]
    return samples


def median_time(fn: Callable[[], object], repeats: int, warmup: int) -> tuple[float, float]:
    """(median seconds of ``repeats`` calls after ``warmup`` calls, seconds of the first call)."""
    warm = [timed(fn)[1] for _ in range(warmup)]
    times = [timed(fn)[1] for _ in range(repeats)]
    return statistics.median(times), (warm or times)[0]


@functools.partial(jax.jit, donate_argnums=(1,), static_argnames=("last_only",))
def forward_after(target, cache, lengths, tokens, positions=None, mask=None, *, last_only=False):
    """``(logits, cache)`` of the target's forward on ``tokens`` after the first ``lengths``
    cache entries: the cache (donated) is rolled back first, so that every call sees the same
    committed context. ``last_only``: the last position's logits ``[B, V]`` only, the output
    head computed on that row alone (prefill)."""
    cache = cache.rollback(lengths)
    keep = 1 if last_only else None
    logits, cache, _ = target(
        tokens, cache=cache, positions=positions, attn_mask=mask, logits_to_keep=keep
    )
    return (logits[:, -1] if last_only else logits), cache


@dataclasses.dataclass
class Run:
    """One benchmark run's clock and counters, passed to whatever compiles or times."""

    compile_s: float = 0.0  # seconds spent compiling
    count: int = 0  # things timed (generations, calls)
    load_start: float = dataclasses.field(default_factory=lambda: os.getloadavg()[0])
    start: float = dataclasses.field(default_factory=time.perf_counter)

    def summary(self, counted: str) -> str:
        """Wall time, compile time, ``count counted`` and the load average at start and end."""
        wall_s = time.perf_counter() - self.start
        return (
            f"Wall time {wall_s:.0f} s ({self.compile_s:.0f} s of it compiling, "
            f"{self.count} {counted}); 1-minute load average {self.load_start:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end (above {os.cpu_count()} means other jobs shared "
            "the CPUs)."
        )


# ----------------------------------------------------------------------------- tables


def fmt(x, spec: str) -> str:
    """``format(x, spec)``, or an em dash for None."""
    return "—" if x is None else format(x, spec)


def _align(columns: int, left: int | None) -> list[str]:
    left = columns if left is None else left
    return ["---"] * left + ["---:"] * (columns - left)


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown(head: list[str], body: list[list[str]], left: int) -> str:
    """A Markdown table whose first ``left`` columns are left-aligned, the others right."""
    return "\n".join(map(_line, [head, _align(len(head), left), *body]))


def table(header: Sequence[str], rows: Sequence[Sequence[object]], left: int | None = None) -> str:
    """A compact Markdown table (``|---|---:|``): the first ``left`` columns (default all)
    left-aligned, the others right."""
    align = "|" + "|".join(_align(len(header), left)) + "|"
    return "\n".join([_line(header), align, *map(_line, rows)])
