r"""Benchmarks the speculative decoding loop: block efficiency, acceptance, speed and loop overhead.

For each draft/target pair and temperature, every verifier is run over a grid of K (paths) and L
(draft length) with ``specjax.decode``'s compiled generation (prefill + one ``lax.while_loop``),
side by side with the autoregressive baseline on the same prompts and ``max_new_tokens``:

* **pairs** -- ``shakespeare``: the committed byte-level Shakespeare target (3.2M parameters)
  with its distilled 0.43M-parameter draft model (``ModelDrafter``, any verifier, any K);
  ``smollm2``: SmolLM2-135M-Instruct (``specjax.models.fetch_smollm2``, Q4_1 GGUF dequantized to
  fp32) with the n-gram (prompt-lookup) drafter (``NgramDrafter``, one chain: K = 1), prompted
  through its chat template to reproduce an edited code snippet, so that lookups hit.
* **verifiers** -- ``greedy`` (temperature 0 only: it is the argmax rule, not lossless at T > 0),
  ``token``, ``block`` on chains (K = 1); ``specinfer`` (i.i.d. paths), ``spectr``, ``gbv`` on
  K = 1, 2, 3, 4 paths; L = 2, 4, 6. No stop tokens: every row generates exactly
  ``--max_new_tokens``, so speculative and autoregressive runs produce the same number of tokens.
* **timing** -- each generation is run ``--warmup`` times untimed (the first run compiles;
  compile time is reported apart), then timed in rounds *interleaved* with the autoregressive
  baseline's generation, so that both see the same machine load (``--repeats`` rounds at least,
  more until a configuration's rounds take ``--min_time`` seconds); speedup = median baseline
  time / median speculative time.
  Every run is a call of ``specjax.decode.generate`` (jax caches its compiled executable after
  the first call, so later calls only run it) and its time is ``metrics.seconds``: the compiled
  program alone, one executable call per generation.
* **loop overhead** -- for representative configurations (``--overhead``), the time of a whole
  generation against the sum of its model calls, each jitted and timed alone on the same inputs
  (the state after prefill): prefill, then per step the drafter's ``propose``, the target's tree
  forward (T = 1 + K*L tokens with ``specjax.tree`` positions and mask; cache donated and rolled
  back in the call) and the verification (logits -> probabilities -> verifier), times the number
  of loop iterations. Overhead = generate / sum - 1 (goal: < 10%). Also the jitted standalone
  ``step`` times the iterations, which isolates the while loop itself from the per-step
  bookkeeping (commit, cache compaction, drafter commit, counters).

Outputs: Markdown tables (one per pair x temperature, the overhead table and goal checks) printed
and written to ``--output`` with the command, machine and date; PNG plots (block efficiency vs L
per verifier, one panel per temperature x K; accepted-length histograms of a representative
configuration per verifier) into ``--plot_dir`` as ``decode_block_efficiency_<pair>.png`` and
``decode_histogram_<pair>.png`` (needs matplotlib, the ``[train]`` extra; skipped without it).

The full grid (the default: 87 Shakespeare and 35 SmolLM2 configurations, most of the time spent
compiling them) should take about 40 minutes on 2 CPU cores (35-55 depending on other load; not
yet run in full); ``--quick`` is a smoke run (tiny grid, 16 new tokens) of about two minutes per
pair. Run from the repository root:

  python scripts/bench_decode.py --output=/tmp/bench_decode.md --plot_dir=benchmarks
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import statistics

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import jax
import numpy as np
from absl import app, flags, logging
from benchlib import decode_report, plots
from benchlib.decode_pairs import (
    ALL_VERIFIERS,
    AR_CASE,
    Pair,
    cases_for,
    load_pair,
    representative,
)
from benchlib.decode_report import Results, Row
from benchlib.decode_timing import Generator, measure_overhead

import specjax
from specjax.decode import AUTOREGRESSIVE, DecodeConfig
from specjax.decode.seams import PROGRAMS
from specjax.sampling import SamplingParams

_PAIRS = flags.DEFINE_list("pairs", ["shakespeare", "smollm2"], "Pairs: shakespeare, smollm2.")
_TEMPERATURES = flags.DEFINE_list("temperatures", ["0", "1"], "Sampling temperatures.")
_VERIFIERS = flags.DEFINE_list("verifiers", list(ALL_VERIFIERS), "Verifiers to run.")
_PATHS = flags.DEFINE_list(
    "paths", ["1", "2", "3", "4"], "K values (multi-path verifiers; chains and n-gram use K = 1)."
)
_LENGTHS = flags.DEFINE_list("lengths", ["2", "4", "6"], "Draft lengths L.")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 128, "Tokens generated per row.")
_BATCH = flags.DEFINE_integer("batch", 1, "Rows decoded together (the pair's prompts, cycled).")
_REPEATS = flags.DEFINE_integer(
    "repeats", 1, "Timed runs of each generation at least (median), interleaved with the baseline."
)
_MIN_TIME = flags.DEFINE_float(
    "min_time",
    2.0,
    "More timed rounds (up to --max_repeats) until the rounds of a configuration (its runs and "
    "the baseline's) take about this many seconds: short generations are timed several times.",
)
_MAX_REPEATS = flags.DEFINE_integer("max_repeats", 20, "Timed rounds per configuration at most.")
_WARMUP = flags.DEFINE_integer(
    "warmup", 1, "Untimed runs of each generation first, the first one compiling (at least 1)."
)
_SEED = flags.DEFINE_integer("seed", 0, "PRNG seed of every generation.")
_OVERHEAD = flags.DEFINE_enum(
    "overhead",
    "representative",
    ["none", "representative", "all"],
    "Loop-overhead measurement: none; the baseline, block and gbv at the representative K and L "
    "of each pair and temperature; or every configuration.",
)
_OVERHEAD_ROUNDS = flags.DEFINE_integer(
    "overhead_rounds", 3, "Interleaved rounds of the overhead timing (one generation each)."
)
_COMPONENT_REPEATS = flags.DEFINE_integer(
    "component_repeats", 3, "Timed calls of each model call alone per overhead round."
)
_OUTPUT = flags.DEFINE_string("output", "/tmp/bench_decode.md", "Markdown report file.")
_PLOT_DIR = flags.DEFINE_string("plot_dir", "benchmarks", "Directory of the PNG plots.")
_SHAKESPEARE = flags.DEFINE_string(
    "shakespeare", "checkpoints/shakespeare", "Directory with the target/ and draft/ checkpoints."
)
_SMOLLM2 = flags.DEFINE_string(
    "smollm2", "smollm2", "SmolLM2 model: 'smollm2' (fetch_smollm2) or a .gguf / checkpoint path."
)
_QUICK = flags.DEFINE_bool(
    "quick", False, "Smoke run: a tiny grid (flags given explicitly still win)."
)

QUICK = {  # flag -> value under --quick unless the flag is given on the command line
    "temperatures": ["0"],
    "verifiers": ["token", "block", "gbv"],
    "paths": ["1", "2"],
    "lengths": ["2"],
    "max_new_tokens": 16,
    "repeats": 1,
    "min_time": 0.5,
    "overhead_rounds": 1,
    "component_repeats": 2,
}
SETTINGS = ("max_new_tokens", "batch", "seed", "warmup", "repeats", "min_time", "max_repeats")


def overhead_cases(pair: Pair, grid: dict, cases: list) -> set:
    """The configurations whose loop overhead ``--overhead`` asks for."""
    if _OVERHEAD.value == "all":
        return {AR_CASE, *cases}
    if _OVERHEAD.value == "representative":
        picks = [v for v in ("block", "gbv") if v in grid["verifiers"]] or grid["verifiers"][:1]
        return {AR_CASE} | {representative(pair, v, grid["paths"], grid["lengths"]) for v in picks}
    return set()


def run_pair(pair: Pair, temperature: float, grid: dict, out: Results, run: benchlib.Run) -> dict:
    """Runs every configuration of one pair at one temperature into ``out``; returns the baseline
    summary."""
    sp = SamplingParams(temperature=temperature)
    max_new, seed = _MAX_NEW.value, _SEED.value
    overhead = functools.partial(
        measure_overhead,
        rounds=_OVERHEAD_ROUNDS.value,
        component_repeats=_COMPONENT_REPEATS.value,
        run=run,
    )
    ar_gen = Generator(
        pair.target, None, pair.prompts, DecodeConfig(AUTOREGRESSIVE, sp, max_new), seed, run
    )
    warm = [ar_gen.last.metrics.seconds] + [ar_gen.run() for _ in range(_WARMUP.value - 1)]
    ar_estimate = min(warm)
    ar_tokens = ar_gen.last.tokens
    ar_times: list[float] = []
    cases = cases_for(pair, temperature, grid["verifiers"], grid["paths"], grid["lengths"])
    measured = overhead_cases(pair, grid, cases)
    if AR_CASE in measured:
        benchlib.log(f"{pair.name} T={temperature}: overhead of the autoregressive baseline")
        steps = ar_gen.last.metrics.target_forwards
        out.overheads.append((pair.name, temperature, AR_CASE, overhead(ar_gen, steps)))
    hlo = None
    for i, case in enumerate(cases):
        config = DecodeConfig(case.verifier, sp, max_new)
        drafter = pair.make_drafter(sp, case.k, case.l)
        gen = Generator(pair.target, drafter, pair.prompts, config, seed, run)
        if hlo is None:
            hlo = gen.hlo_facts() or {}
        warm = [gen.last.metrics.seconds] + [gen.run() for _ in range(_WARMUP.value - 1)]
        rounds = int(np.ceil(_MIN_TIME.value / (ar_estimate + min(warm))))
        rounds = max(_REPEATS.value, min(rounds, _MAX_REPEATS.value))
        samples = benchlib.interleaved({"ar": (ar_gen.run, 1), "spec": (gen.run, 1)}, rounds)
        ar_times += samples["ar"]
        seconds = statistics.median(samples["spec"])
        m = gen.last.metrics
        metrics = dataclasses.replace(
            m, seconds=seconds, tokens_per_second=m.generated_tokens / seconds
        )
        same = gen.last.tokens == ar_tokens if sp.greedy else None
        ar_s = statistics.median(samples["ar"])
        row = Row(pair.name, temperature, case, metrics, ar_s, gen.compile_s, same, rounds)
        out.rows.append(row)
        benchlib.log(
            f"{pair.name} T={temperature} [{i + 1}/{len(cases)}] {case.label}: "
            f"E={metrics.block_efficiency:.2f} acc={metrics.acceptance_rate:.2f} "
            f"{metrics.tokens_per_second:.1f} tok/s, speedup {row.speedup:.2f} "
            f"(compile {gen.compile_s:.1f} s)"
        )
        if case in measured:
            benchlib.log(f"{pair.name} T={temperature}: overhead of {case.label}")
            steps = metrics.target_forwards
            out.overheads.append((pair.name, temperature, case, overhead(gen, steps)))
        del gen
        if (i + 1) % 15 == 0:
            # Every compiled program keeps its LLVM code mapped; a few dozen of them exhaust
            # XLA:CPU's section memory ("Unable to allocate section memory"). Start afresh.
            jax.clear_caches()
            PROGRAMS.clear()  # generate's own compiled programs
    if not ar_times:  # no speculative configuration: time the baseline alone
        ar_times = [ar_gen.run() for _ in range(_REPEATS.value)]
    tokens = sum(len(r) for r in ar_tokens)
    return {
        "tok_s": tokens / statistics.median(ar_times),
        "tok_s_range": (tokens / max(ar_times), tokens / min(ar_times)),
        "runs": len(ar_times),
        "compile_s": ar_gen.compile_s,
        "hlo": hlo if hlo is not None else (ar_gen.hlo_facts() or {}),
    }


code_digest = functools.partial(
    benchlib.source_digest, pathlib.Path(specjax.__file__).parent, recursive=True
)
"""Short sha256 of the ``specjax`` sources, to tell which code was measured."""


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every restore at INFO
    value = functools.partial(benchlib.quick_value, quick=QUICK)
    grid = {
        "temperatures": [float(t) for t in value("temperatures")],
        "verifiers": list(value("verifiers")),
        "paths": [int(k) for k in value("paths")],
        "lengths": [int(l) for l in value("lengths")],
    }
    for name in ("max_new_tokens", "repeats", "min_time", "overhead_rounds", "component_repeats"):
        flags.FLAGS[name].value = value(name)
    unknown = set(grid["verifiers"]) - set(ALL_VERIFIERS)
    if unknown:
        raise app.UsageError(f"unknown --verifiers {sorted(unknown)}")
    if min(grid["paths"]) < 1 or min(grid["lengths"]) < 1 or _BATCH.value < 1:
        raise app.UsageError("--paths, --lengths and --batch must be >= 1")
    if _WARMUP.value < 1:
        raise app.UsageError("--warmup must be >= 1 (the first run compiles)")
    if _REPEATS.value < 1 or _OVERHEAD_ROUNDS.value < 1 or _COMPONENT_REPEATS.value < 1:
        raise app.UsageError("--repeats, --overhead_rounds and --component_repeats must be >= 1")

    run = benchlib.Run()
    digest = code_digest()
    out = Results()
    pairs: dict[str, Pair] = {}
    sections: list[str] = []
    hlo: dict[str, dict] = {}
    sources = {"shakespeare": _SHAKESPEARE.value, "smollm2": _SMOLLM2.value}
    for name in _PAIRS.value:
        benchlib.log(f"loading {name}")
        pair = pairs[name] = load_pair(name, _BATCH.value, sources)
        for t in grid["temperatures"]:
            baseline = run_pair(pair, t, grid, out, run)
            hlo.setdefault(name, baseline["hlo"])
            mine = [r for r in out.rows if r.pair == name and r.temperature == t]
            sections.append(decode_report.results_table(pair, t, mine, baseline, _MAX_NEW.value))
    if out.overheads:
        sections.append(decode_report.overhead_table(out.overheads, hlo))
    sections.append(decode_report.goal_checks(out.rows))
    written = plots.decode_plots(pairs, out.rows, grid, _PLOT_DIR.value)
    settings = {name: flags.FLAGS[name].value for name in SETTINGS}
    head = decode_report.header(grid, settings, digest, _QUICK.value)
    tail = f"{run.summary('generations')} " + (
        f"Plots: {', '.join(f'`{p}`' for p in written)}." if written else "No plots (matplotlib)."
    )
    if code_digest() != digest:
        tail += f" **Warning**: the `specjax` sources changed during the run (now {code_digest()})."
    benchlib.write_report("\n\n".join([head, *sections, tail]) + "\n", _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
