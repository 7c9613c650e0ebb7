r"""Benchmarks the specjax verifiers: time per call against a read-once baseline, and efficiency.

Parts, each printed as Markdown tables (and written to ``--output`` if given):

* **timing** -- every verifier (``greedy``, ``token``, ``block``, ``gumbel`` (given its noise) on
  chains, K = 1; ``specinfer`` with ``replacement=True``, ``spectr``, ``gbv`` on K paths) jitted,
  compiled ahead of time (compile excluded), warmed up, then the median of several calls with
  ``jax.block_until_ready``. Next to each, in the same run and on the same device arrays, the
  *read-once* baseline: one jitted fused reduction (a sum over V) of exactly ``draft_probs`` and
  ``target_probs``, i.e. the cost of reading the verifier's inputs once. Ratio = verifier time /
  read-once time; the goals are <= 2x for chain verifiers and <= 4x for multi-path ones. Then the
  scaling of each verifier with V (fixed B, L) and with L (fixed B, V), read off as time ratios.
  The calls of one point (and all points of the two scaling tables) are timed in interleaved
  rounds, so their ratios see the same machine load. ``--baseline=<commit>`` also times that
  commit's verifiers (``git show``, imported beside the working tree's by
  :mod:`benchlib.verify_baseline`) in the same rounds on the same arrays, in a table of its own;
  ``--points`` replaces the main grid (and drops the scaling tables), e.g. for that comparison:

    python scripts/bench_verify.py --parts=timing --baseline=410d1e0^ --points=64:4:32768,1:4:32768

* **primitives** -- the cost of single XLA operations over one ``[B, V]`` row set (sum, max,
  argmax, random bits, the verifiers' final categorical draw, cumsum, argsort), which explains
  what dominates where the goals are not met.
* **share** (``--parts=share``) -- each verifier's time as a share of the SmolLM2-135M target's
  tree forward (B = 1 and 8, K = 1-4, L = 4; see :mod:`benchlib.verify_share`).
* **greedy** (``--parts=greedy``) -- greedy verification taken apart: the draft-law check, the
  rule alone and the argmax, at B = 1, 8, 64 and the primitives' V (:mod:`benchlib.verify_greedy`).
* **efficiency** -- block efficiency E[tau] + 1 (with its standard error) of each verifier on
  the synthetic families of :mod:`specjax.verify.synthetic`, the measured P(tau >= 1) and the
  optimal single-step acceptance at the root that no lossless verifier can beat (1 - TV for a
  chain, ``verify.optimal_acceptance`` for K drafts with or without replacement).

Timing inputs are random softmax rows (a small bank of rows per depth, indexed by a hash of the
prefix, so paths that share a prefix share their rows) with draft tokens drawn from q by inverse
CDF; generating them is not timed. The default grid's timing part takes about 3 minutes on 2 CPU
cores and needs about 8 GB of memory; ``--quick`` is a smoke run of under a minute,
``--full`` a wider grid (not timed here; GBV alone takes 20-40 s per call at its largest points).
The results in BENCHMARKS.md were produced, from the repository root, with:

  python scripts/bench_verify.py --parts=timing,share --min_reps=7 --output=/tmp/bench_verify_new.md
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import pathlib
import statistics
from collections.abc import Callable

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from benchlib import verify_baseline, verify_greedy, verify_report, verify_share
from benchlib.verify_inputs import (
    MULTIPATH,
    TIMED_CHAIN,
    chain_noise,
    chain_of,
    first_paths,
    jitted_verifier,
    read_once,
    timing_inputs,
    verifier_call,
)

from specjax import verify
from specjax.verify import common, gbv, synthetic

_QUICK = flags.DEFINE_bool("quick", False, "Smoke run on tiny shapes (under a minute).")
_FULL = flags.DEFINE_bool("full", False, "Wider grid (B = 1, 8, 64; more V and L points).")
_PARTS = flags.DEFINE_list(
    "parts",
    ["timing", "primitives", "efficiency"],
    "Parts to run: timing, primitives, efficiency; share (SmolLM2 tree forward) and greedy "
    "(greedy verification taken apart) are not default.",
)
_OUTPUT = flags.DEFINE_string("output", None, "Also write the Markdown tables to this file.")
_SEED = flags.DEFINE_integer("seed", 0, "Random seed.")
_MIN_REPS = flags.DEFINE_integer(
    "min_reps", 3, "Interleaved timing rounds (every function is called at least once a round)."
)
_MIN_TIME = flags.DEFINE_float(
    "min_time",
    None,
    "Seconds of timed calls per function, spread over the rounds (default: per grid).",
)
_MAX_REPS = flags.DEFINE_integer("max_reps", 50, "Timed calls per function and round, at most.")
_BASELINE = flags.DEFINE_string(
    "baseline",
    None,
    "Timing: also time the verifiers of this commit (e.g. 410d1e0^), in the same rounds.",
)
_POINTS = flags.DEFINE_list(
    "points",
    None,
    "Timing: B:L:V points replacing the main grid (no scaling tables), e.g. 64:4:32768.",
)
_MULTI_K = flags.DEFINE_list("multi_k", None, "Timing: K values of the multi-path verifiers.")
_ROWS = flags.DEFINE_integer("rows", None, "Efficiency: rows (independent problems).")
_BOUND_ROWS = flags.DEFINE_integer(
    "bound_rows", None, "Efficiency: rows for the (slow) without-replacement optimal bound."
)


@dataclasses.dataclass(frozen=True)
class Grid:
    """What one run measures.

    Attributes:
      main: ``(B, L, V)`` points of the main timing table.
      multi_k: K values of the multi-path verifiers (chains always have K = 1).
      scale_v: ``(B, L, [V, ...])`` for the time-vs-V table (multi-path at the largest K), or
        None (no table).
      scale_l: ``(B, V, [L, ...])`` for the time-vs-L table, or None.
      prim: ``(B, V)`` of the primitives table.
      families: synthetic families of the efficiency table.
      eff_vocab: V of the efficiency table.
      eff_length: L of the efficiency table.
      eff_k: K values of the multi-path verifiers in the efficiency table.
      rows: efficiency rows.
      bound_rows: rows used for the without-replacement optimal bound.
      min_time: seconds of timed calls per measurement (at least ``--min_reps`` calls).
    """

    main: tuple[tuple[int, int, int], ...]
    multi_k: tuple[int, ...]
    scale_v: tuple[int, int, tuple[int, ...]] | None
    scale_l: tuple[int, int, tuple[int, ...]] | None
    prim: tuple[int, int]
    families: tuple[str, ...]
    eff_vocab: int
    eff_length: int
    eff_k: tuple[int, ...]
    rows: int
    bound_rows: int
    min_time: float


def _product(bs, ls, vs):
    return tuple((b, l, v) for b in bs for l in ls for v in vs)


GRIDS = {
    "quick": Grid(
        main=((2, 2, 2048),),
        multi_k=(2,),
        scale_v=(2, 2, (2048, 8192)),
        scale_l=(2, 2048, (1, 2)),
        prim=(2, 8192),
        families=("close", "far"),
        eff_vocab=100,
        eff_length=2,
        eff_k=(2,),
        rows=256,
        bound_rows=16,
        min_time=0.1,
    ),
    "default": Grid(
        # B = 1 at two corners only (its sub-ms calls cost mostly compile time); (64, 8, 131072)
        # is left to --full: GBV alone takes 20-40 s per call there.
        main=(
            (1, 4, 32768),
            (1, 8, 131072),
            *_product((64,), (4, 8), (32768,)),
            (64, 4, 131072),
        ),
        multi_k=(2, 4),
        scale_v=(64, 4, (8192, 32768, 131072)),
        scale_l=(64, 32768, (2, 4, 8)),
        prim=(64, 131072),
        families=("close", "medium", "far", "flat"),
        eff_vocab=1000,
        eff_length=4,
        eff_k=(2, 3, 4),
        rows=9216,
        bound_rows=64,
        min_time=0.5,
    ),
}
GRIDS["full"] = dataclasses.replace(
    GRIDS["default"],
    main=_product((1, 8, 64), (4, 8), (32768, 131072)),
    scale_v=(64, 4, (8192, 32768, 65536, 131072)),
    scale_l=(64, 32768, (2, 4, 6, 8)),
    bound_rows=256,
    min_time=1.0,
)


# ----------------------------------------------------------------------------- measurement


@dataclasses.dataclass
class Timer:
    """Times jitted calls (:meth:`ms`), counting into ``run``."""

    run: benchlib.Run
    min_time: float  # seconds of timed calls per function, spread over the rounds

    def ms(self, calls: dict[object, tuple[Callable, tuple]]) -> dict[object, float]:
        """Median wall time (ms) per call of each ``name: (fn, args)``, timed interleaved.

        Every function is jitted and compiled ahead of time (compile time excluded), called once
        to warm up, then called in ``--min_reps`` rounds; in each round every function runs
        enough times to spend about ``min_time / min_reps`` seconds (at least once).
        Interleaving the rounds makes the ratios robust to slow drifts of the machine's load.
        """
        timed = {}
        for name, (fn, args) in calls.items():
            aot = lambda fn=fn, args=args: jax.jit(fn).lower(*args).compile()
            compiled, seconds = benchlib.timed(aot)  # lowering and compiling
            self.run.compile_s += seconds
            call = benchlib.wall(functools.partial(compiled, *args))
            estimate = call()  # warm-up
            per_round = np.clip(self.min_time / (_MIN_REPS.value * estimate), 1, _MAX_REPS.value)
            timed[name] = (call, int(per_round))
        samples = benchlib.interleaved(timed, _MIN_REPS.value)
        self.run.count += sum(len(t) for t in samples.values())
        return {name: 1e3 * statistics.median(t) for name, t in samples.items()}


def measure_group(
    timer: Timer, key, group: dict[tuple[int, int, int], set[int]], results: dict, baseline=None
) -> None:
    """Times read-once and every verifier at the points ``{(B, L, V): {K, ...}}``, interleaved.

    All points of a group are timed in the same rounds (see :meth:`Timer.ms`), so the ratios
    between them (verifier / read-once, and across V or L) see the same machine load. K = 1
    times the chain verifiers on path 0, K > 1 the multi-path verifiers on the first K paths.
    ``baseline``: another commit's ``specjax.verify``, timed too (as ``name@baseline``).
    """
    key_verify = jax.random.key(1)
    calls: dict = {}
    for (b, l, v), ks in group.items():
        k_max = max(ks)
        base = timing_inputs(key, batch=b, num_paths=k_max, length=l, vocab=v)
        for k in sorted(ks):
            draft = chain_of(base) if k == 1 else base if k == k_max else first_paths(base, k)
            calls[(b, l, v, k, "read-once")] = (read_once, (draft[1], draft[2]))
            for name in TIMED_CHAIN if k == 1 else MULTIPATH:
                first = chain_noise(key_verify, draft[2]) if name == "gumbel" else key_verify
                calls[(b, l, v, k, name)] = (verifier_call(name), (first, *draft))
                if baseline is not None and hasattr(baseline, f"{name}_verify"):
                    fn = verifier_call(name, package=baseline)
                    calls[(b, l, v, k, f"{name}@baseline")] = (fn, (first, *draft))
        del base
    times = timer.ms(calls)
    results.update(times)
    for (b, l, v), ks in group.items():
        for k in sorted(ks):
            summary = ", ".join(
                f"{name} {t:.2f} ms" for (*point, name), t in times.items() if point == [b, l, v, k]
            )
            logging.info("B=%d L=%d V=%d K=%d: %s", b, l, v, k, summary)


def run_timing(timer: Timer, grid: Grid, key, baseline=None) -> dict:
    """Measures the scaling points (if any) as one interleaved group, then the rest point by
    point."""
    k_max = max(grid.multi_k)
    scaling: dict[tuple[int, int, int], set[int]] = {}
    if grid.scale_v is not None:
        b, l, vs = grid.scale_v
        for v in vs:
            scaling[(b, l, v)] = {1, k_max}
    if grid.scale_l is not None:
        b, v, ls = grid.scale_l
        for l in ls:
            scaling[(b, l, v)] = {1, k_max}
    results: dict = {}
    if scaling:
        measure_group(timer, key, scaling, results, baseline)
    for point in grid.main:
        ks = {k for k in (1, *grid.multi_k) if (*point, k, "read-once") not in results}
        if ks:
            measure_group(timer, key, {point: ks}, results, baseline)
    return results


def run_primitives(timer: Timer, grid: Grid, key) -> str:
    b, v = grid.prim
    k_x, k_op = jax.random.split(key)
    x = jax.nn.softmax(2.0 * jax.random.normal(k_x, (b, v)), axis=-1)
    ops = {
        "sum over V (read once)": lambda k, x: jnp.sum(x, axis=-1),
        "max over V": lambda k, x: jnp.max(x, axis=-1),
        "jnp.argmax over V": lambda k, x: jnp.argmax(x, axis=-1),
        "two-level argmax (common.argmax_first, used by greedy)": (
            lambda k, x: common.argmax_first(x)
        ),
        "uniform random bits [B, V]": lambda k, x: jnp.sum(jax.random.uniform(k, x.shape), -1),
        "Gumbel-max draw (jax.random.categorical)": (
            lambda k, x: jax.random.categorical(k, jnp.log(x), axis=-1)
        ),
        "verifiers' draw (common.sample_weights)": lambda k, x: common.sample_weights(k, x, x),
        "cumsum over V": lambda k, x: jnp.cumsum(x, axis=-1)[:, -1],
        "stable argsort over V": lambda k, x: jnp.argsort(x, axis=-1, stable=True)[:, 0],
        "GBV's order (gbv.kappa_order: one 64-bit sort; one per depth of a path)": (
            lambda k, x: gbv.kappa_order(x)[:, 0]
        ),
    }
    times = timer.ms({label: (op, (k_op, x)) for label, op in ops.items()})
    return verify_report.primitives_table(b, v, times)


_sample = jax.jit(
    synthetic.sample_draft, static_argnums=(1, 2, 3, 4), static_argnames="replacement"
)


def efficiency_row(key, draft: synthetic.Draft, name: str, replacement: bool) -> list[float]:
    """``[E[tau] + 1, its standard error, P(tau >= 1)]`` of one verifier on one draft batch."""
    result = jitted_verifier(name, replacement)(key, *draft)
    tau = np.asarray(result.num_accepted, np.float64)
    return [tau.mean() + 1, tau.std(ddof=1) / np.sqrt(tau.size), float(np.mean(tau >= 1))]


def run_efficiency(grid: Grid, key) -> str:
    k_max = max(grid.eff_k)
    rows, bound_rows = grid.rows, min(grid.bound_rows, grid.rows)
    out = []  # [family, K, verifier, E[tau] + 1, SE, P(tau >= 1), bound, bound label]
    for fam_name in grid.families:
        family = dataclasses.replace(
            synthetic.FAMILIES[fam_name], vocab_size=grid.eff_vocab, seed=_SEED.value
        )
        key, k_iid, k_wor, k_ver = jax.random.split(key, 4)
        iid = _sample(k_iid, family, rows, k_max, grid.eff_length)
        wor = _sample(k_wor, family, rows, k_max, grid.eff_length, replacement=False)
        # Both drafts have the same root rows (they depend only on the row's root prefix).
        p_root, q_root = iid.target_probs[:, 0, 0], iid.draft_probs[:, 0, 0]  # [B, V]
        one_minus_tv = float(jnp.mean(jnp.sum(jnp.minimum(p_root, q_root), axis=-1)))
        chain = chain_of(iid)
        for name in ("token", "block"):
            row = efficiency_row(k_ver, chain, name, True)
            out.append([fam_name, 1, name, *row, one_minus_tv, "1 − TV"])
        for k in grid.eff_k:
            sub_iid, sub_wor = first_paths(iid, k), first_paths(wor, k)
            b_iid = float(jnp.mean(verify.optimal_acceptance(p_root, q_root, k, replacement=True)))
            b_wor = np.asarray(
                verify.optimal_acceptance(
                    p_root[:bound_rows], q_root[:bound_rows], k, replacement=False
                ),
                np.float64,
            )
            se_wor = b_wor.std(ddof=1) / np.sqrt(b_wor.size) if b_wor.size > 1 else 0.0
            for name in MULTIPATH:
                row = efficiency_row(k_ver, sub_iid, name, True)
                out.append([fam_name, k, f"{name} (i.i.d.)", *row, b_iid, "α* i.i.d."])
            row = efficiency_row(k_ver, sub_wor, "specinfer", False)
            label = f"α* w/o repl. (±{se_wor:.4f})†"
            out.append([fam_name, k, "specinfer (w/o repl.)", *row, float(b_wor.mean()), label])
            del sub_iid, sub_wor
        del iid, wor, chain, p_root, q_root  # free before the next family's drafts (peak memory)
        logging.info("efficiency: family %s done", fam_name)
    return verify_report.efficiency_table(grid, out, rows, bound_rows)


# ----------------------------------------------------------------------------- main


code_digest = functools.partial(benchlib.source_digest, pathlib.Path(verify.__file__).parent)
"""Short sha256 of the ``specjax/verify`` sources, to tell which verifier code was timed."""


def main(argv):
    del argv
    if _QUICK.value and _FULL.value:
        raise app.UsageError("--quick and --full are exclusive")
    grid_name = "quick" if _QUICK.value else "full" if _FULL.value else "default"
    grid = GRIDS[grid_name]
    grid = dataclasses.replace(
        grid,
        rows=_ROWS.value or grid.rows,
        bound_rows=_BOUND_ROWS.value or grid.bound_rows,
        min_time=_MIN_TIME.value if _MIN_TIME.value is not None else grid.min_time,
    )
    if _POINTS.value:
        points = tuple(tuple(int(x) for x in point.split(":")) for point in _POINTS.value)
        if any(len(point) != 3 for point in points):
            raise app.UsageError("--points takes B:L:V, e.g. 64:4:32768")
        grid = dataclasses.replace(grid, main=points, scale_v=None, scale_l=None)
        grid_name += ", --points"
    if _MULTI_K.value:
        grid = dataclasses.replace(grid, multi_k=tuple(int(k) for k in _MULTI_K.value))
    unknown = set(_PARTS.value) - {"timing", "primitives", "efficiency", "share", "greedy"}
    if unknown:
        raise app.UsageError(f"unknown --parts {sorted(unknown)}")
    baseline = None
    if _BASELINE.value:
        baseline = verify_baseline.import_verifiers(_BASELINE.value)
    run = benchlib.Run()
    timer = Timer(run, grid.min_time)
    digest = code_digest()
    key = jax.random.key(_SEED.value)
    k_time, k_prim, k_eff = jax.random.split(key, 3)
    sections = [
        f"### Verifier benchmark ({grid_name} grid)\n\n"
        f"`{benchlib.command()}` on {benchlib.machine()}, "
        f"{datetime.date.today().isoformat()}; `specjax/verify` sources sha256 {digest}."
    ]
    if "timing" in _PARTS.value:
        results = run_timing(timer, grid, k_time, baseline)
        sections += verify_report.timing_tables(grid, results)
        if baseline is not None:
            sha = baseline.__name__.removeprefix("verify_")
            name = f"`{_BASELINE.value}` ({sha})" if sha != _BASELINE.value else f"`{sha}`"
            sections.append(verify_report.baseline_table(grid, results, name))
    if "primitives" in _PARTS.value:
        sections.append(run_primitives(timer, grid, k_prim))
    if "efficiency" in _PARTS.value:
        sections.append(run_efficiency(grid, k_eff))
    if "share" in _PARTS.value:
        sections.append(verify_share.run_share(timer, k_time))
    if "greedy" in _PARTS.value:
        sections.append(verify_greedy.run_greedy(timer, k_time, vocab=grid.prim[1]))
    sections.append(run.summary("timed calls"))
    if code_digest() != digest:
        sections.append(
            f"**Warning**: the `specjax/verify` sources changed during the run (now "
            f"{code_digest()}); the modules imported at the start were measured."
        )
    benchlib.write_report("\n\n".join(sections) + "\n", _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
