"""``bench_accelerator.py``'s parts: the report (Markdown and JSON, rewritten after every item),
the sections' measurements, and their sizes on an accelerator and in ``--quick``.

Every section runs its items one by one under a time budget; an item that raises records its
error (type and message) and the next item still runs, and an item that would start after the
budget is spent is skipped with a note. Both files are replaced atomically after every item, so
a run killed by a time limit leaves what finished.

Modules: ``sizes`` (what a run measures), ``report``, ``figures`` (the key figures, top-level
keys of the JSON), ``shared`` (timing, bytes, models), ``ceiling`` (the copy ceiling inside one
program and per host call), ``loops`` (a step timed as N steps inside one program),
``variants`` (model and compiler-option variants), ``hlo_ops`` (operations per step from the
compiled HLO), ``trace`` (kernels per step from a profiler trace), ``steps`` (the step,
llama8b and ops sections), ``kernels`` (versions, bandwidth, the per-call decode step,
verifiers), ``generation`` (speculative, SSD).
"""

from __future__ import annotations

from collections.abc import Callable

from benchlib.accelerator.generation import speculative_section, ssd_section
from benchlib.accelerator.kernels import (
    bandwidth_section,
    decode_section,
    verify_section,
    versions_section,
)
from benchlib.accelerator.report import Report, Section, log
from benchlib.accelerator.shared import Bench, cached_smollm2
from benchlib.accelerator.sizes import (
    DECODE_MODELS,
    DEFAULT_SECTIONS,
    FULL,
    QUICK,
    SECTIONS,
    Sizes,
)
from benchlib.accelerator.steps import llama8b_section, ops_section, step_section

__all__ = [
    "DECODE_MODELS",
    "DEFAULT_SECTIONS",
    "FULL",
    "QUICK",
    "RUNNERS",
    "SECTIONS",
    "Bench",
    "Report",
    "Sizes",
    "cached_smollm2",
    "log",
]

RUNNERS: dict[str, Callable[[Section, Bench], None]] = {
    "versions": versions_section,
    "bandwidth": bandwidth_section,
    "step": step_section,
    "llama8b": llama8b_section,
    "speculative": speculative_section,
    "ops": ops_section,
    "decode": decode_section,
    "verify": verify_section,
    "ssd": ssd_section,
}
