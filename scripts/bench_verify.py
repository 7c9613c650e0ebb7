r"""Benchmarks the specjax verifiers: time per call against a read-once baseline, and efficiency.

Three parts, each printed as Markdown tables (and written to ``--output`` if given):

* **timing** -- every verifier (``greedy``, ``token``, ``block`` on chains, K = 1; ``specinfer``
  with ``replacement=True``, ``spectr``, ``gbv`` on K paths) jitted, compiled ahead of time
  (compile excluded), warmed up, then the median of several calls with
  ``jax.block_until_ready``. Next to each, in the same run and on the same device arrays, the
  *read-once* baseline: one jitted fused reduction (a sum over V) of exactly ``draft_probs`` and
  ``target_probs``, i.e. the cost of reading the verifier's inputs once. Ratio = verifier time /
  read-once time; the goals are <= 2x for chain verifiers and <= 4x for multi-path ones. Then the
  scaling of each verifier with V (fixed B, L) and with L (fixed B, V), read off as time ratios.
  The calls of one point (and all points of the two scaling tables) are timed in interleaved
  rounds, so their ratios see the same machine load.
* **primitives** -- the cost of single XLA operations over one ``[B, V]`` row set (sum, max,
  argmax, random bits, the verifiers' final categorical draw, cumsum, argsort), which explains
  what dominates where the goals are not met.
* **efficiency** -- block efficiency E[tau] + 1 (with its standard error) of each verifier on
  the synthetic families of :mod:`specjax.verify.synthetic`, the measured P(tau >= 1) and the
  optimal single-step acceptance at the root that no lossless verifier can beat (1 - TV for a
  chain, ``verify.optimal_acceptance`` for K drafts with or without replacement).

Timing inputs are random softmax rows (a small bank of rows per depth, indexed by a hash of the
prefix, so paths that share a prefix share their rows) with draft tokens drawn from q by inverse
CDF; generating them is not timed. The default grid takes about 15 minutes on 2 CPU cores (shared
with other jobs) and needs about 8 GB of memory; ``--quick`` is a smoke run of under a minute,
``--full`` a wider grid (not timed here; GBV alone takes 20-40 s per call at its largest points).
The results in BENCHMARKS.md were produced, from the repository root, with:

  python scripts/bench_verify.py --output=/tmp/bench_verify.md
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import benchlib  # scripts/benchlib.py (scripts run with scripts/ on sys.path)
import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging

from specjax import verify
from specjax.verify import common, synthetic

_QUICK = flags.DEFINE_bool("quick", False, "Smoke run on tiny shapes (under a minute).")
_FULL = flags.DEFINE_bool("full", False, "Wider grid (B = 1, 8, 64; more V and L points).")
_PARTS = flags.DEFINE_list(
    "parts", ["timing", "primitives", "efficiency"], "Parts to run: timing, primitives, efficiency."
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
_ROWS = flags.DEFINE_integer("rows", None, "Efficiency: rows (independent problems).")
_BOUND_ROWS = flags.DEFINE_integer(
    "bound_rows", None, "Efficiency: rows for the (slow) without-replacement optimal bound."
)

CHAIN = ("greedy", "token", "block")
MULTIPATH = ("specinfer", "spectr", "gbv")
GOAL = {"chain": 2.0, "multipath": 4.0}


@dataclasses.dataclass(frozen=True)
class Grid:
    """What one run measures.

    Attributes:
      main: ``(B, L, V)`` points of the main timing table.
      multi_k: K values of the multi-path verifiers (chains always have K = 1).
      scale_v: ``(B, L, [V, ...])`` for the time-vs-V table (multi-path at the largest K).
      scale_l: ``(B, V, [L, ...])`` for the time-vs-L table.
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
    scale_v: tuple[int, int, tuple[int, ...]]
    scale_l: tuple[int, int, tuple[int, ...]]
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


# ----------------------------------------------------------------------------- timing inputs


@functools.partial(jax.jit, static_argnames=("batch", "num_paths", "length", "vocab", "bank"))
def timing_inputs(
    key: jax.Array, *, batch: int, num_paths: int, length: int, vocab: int, bank: int = 16
) -> synthetic.Draft:
    """Valid multi-path verifier inputs, cheap to make at large V.

    Each depth has a bank of ``bank`` draft rows q (softmax of 2 N(0, 1) logits) and target rows
    p (the same logits plus 0.9 N(0, 1)); a node uses bank row ``hash(prefix) % bank``, so paths
    sharing a prefix share their rows. Tokens are drawn from q by inverse CDF.

    Returns:
      A :class:`synthetic.Draft` with tokens ``[B, K, L]``, draft_probs ``[B, K, L, V]`` and
      target_probs ``[B, K, L+1, V]``.
    """
    k_q, k_p, k_u = jax.random.split(key, 3)
    logits = 2.0 * jax.random.normal(k_q, (length + 1, bank, vocab))
    q_bank = jax.nn.softmax(logits, axis=-1)  # [L+1, R, V]
    p_bank = jax.nn.softmax(logits + 0.9 * jax.random.normal(k_p, logits.shape), axis=-1)
    cdf_bank = jnp.cumsum(q_bank, axis=-1)
    u = jax.random.uniform(k_u, (length, batch, num_paths))  # [L, B, K]
    h = jnp.broadcast_to(jnp.arange(batch, dtype=jnp.uint32)[:, None], (batch, num_paths))
    rows, tokens = [], []
    for d in range(length + 1):
        row = (h % bank).astype(jnp.int32)  # [B, K]
        rows.append(row)
        if d == length:
            break
        cdf = cdf_bank[d][row]  # [B, K, V]
        x = jnp.sum(cdf < u[d][..., None] * cdf[..., -1:], axis=-1)
        x = jnp.minimum(x, vocab - 1).astype(jnp.int32)
        tokens.append(x)
        h = h * jnp.uint32(1000003) + x.astype(jnp.uint32) + jnp.uint32(1)
    row = jnp.stack(rows, axis=2)  # [B, K, L+1]
    depth = jnp.arange(length + 1)[None, None, :]
    return synthetic.Draft(
        jnp.stack(tokens, axis=2),
        q_bank[depth[..., :length], row[..., :length]],
        p_bank[depth, row],
    )


@functools.partial(jax.jit, static_argnames=("num_paths",))
def first_paths(draft: synthetic.Draft, num_paths: int) -> synthetic.Draft:
    """The first K of i.i.d. paths are a valid K-path draft (copied to fresh arrays)."""
    return synthetic.Draft(*(x[:, :num_paths] for x in draft))


@jax.jit
def chain_of(draft: synthetic.Draft) -> synthetic.Draft:
    """Path 0 as a chain: tokens ``[B, L]``, draft_probs ``[B, L, V]``, target ``[B, L+1, V]``."""
    return synthetic.Draft(*(x[:, 0] for x in draft))


def read_once(draft_probs: jax.Array, target_probs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The baseline: one fused reduction over V of each input, results ``[B, (K,) L(+1)]``."""
    return jnp.sum(draft_probs, axis=-1), jnp.sum(target_probs, axis=-1)


def verifier_call(name: str) -> Callable[..., common.VerifyResult]:
    fn = verify.get(name)
    if name == "specinfer":
        return lambda key, t, q, p: fn(key, t, q, p, replacement=True)
    return lambda key, t, q, p: fn(key, t, q, p)


# ----------------------------------------------------------------------------- measurement


@dataclasses.dataclass
class Settings:
    """Run-wide measurement settings and counters."""

    min_time: float = 0.5
    compile_s: float = 0.0
    timed_calls: int = 0


RUN = Settings()


def time_ms(calls: dict[object, tuple[Callable, tuple]]) -> dict[object, float]:
    """Median wall time (ms) per call of each ``name: (fn, args)``, timed interleaved.

    Every function is jitted and compiled ahead of time (compile time excluded), called once to
    warm up, then called in ``--min_reps`` rounds; in each round every function runs enough times
    to spend about ``min_time / min_reps`` seconds (at least once). Interleaving the rounds makes
    the ratios robust to slow drifts of the machine's load.
    """
    compiled, per_round = {}, {}
    for name, (fn, args) in calls.items():
        start = time.perf_counter()
        compiled[name] = jax.jit(fn).lower(*args).compile()
        RUN.compile_s += time.perf_counter() - start
        start = time.perf_counter()
        jax.block_until_ready(compiled[name](*args))  # warm-up
        estimate = time.perf_counter() - start
        per_round[name] = int(
            np.clip(RUN.min_time / (_MIN_REPS.value * estimate), 1, _MAX_REPS.value)
        )
    samples: dict[object, list[float]] = {name: [] for name in calls}
    for _ in range(_MIN_REPS.value):
        for name, (_, args) in calls.items():
            for _ in range(per_round[name]):
                start = time.perf_counter()
                jax.block_until_ready(compiled[name](*args))
                samples[name].append(time.perf_counter() - start)
    RUN.timed_calls += sum(len(t) for t in samples.values())
    return {name: 1e3 * statistics.median(t) for name, t in samples.items()}


def measure_group(key, group: dict[tuple[int, int, int], set[int]], results: dict) -> None:
    """Times read-once and every verifier at the points ``{(B, L, V): {K, ...}}``, interleaved.

    All points of a group are timed in the same rounds (see :func:`time_ms`), so the ratios
    between them (verifier / read-once, and across V or L) see the same machine load. K = 1
    times the chain verifiers on path 0, K > 1 the multi-path verifiers on the first K paths.
    """
    key_verify = jax.random.key(1)
    calls: dict = {}
    for (b, l, v), ks in group.items():
        k_max = max(ks)
        base = timing_inputs(key, batch=b, num_paths=k_max, length=l, vocab=v)
        for k in sorted(ks):
            draft = chain_of(base) if k == 1 else base if k == k_max else first_paths(base, k)
            calls[(b, l, v, k, "read-once")] = (read_once, (draft[1], draft[2]))
            for name in CHAIN if k == 1 else MULTIPATH:
                calls[(b, l, v, k, name)] = (verifier_call(name), (key_verify, *draft))
        del base
    times = time_ms(calls)
    results.update(times)
    for (b, l, v), ks in group.items():
        for k in sorted(ks):
            summary = ", ".join(
                f"{name} {t:.2f} ms" for (*point, name), t in times.items() if point == [b, l, v, k]
            )
            logging.info("B=%d L=%d V=%d K=%d: %s", b, l, v, k, summary)


def run_timing(grid: Grid, key) -> dict:
    """Measures the scaling points as one interleaved group, then the rest point by point."""
    k_max = max(grid.multi_k)
    scaling: dict[tuple[int, int, int], set[int]] = {}
    b, l, vs = grid.scale_v
    for v in vs:
        scaling[(b, l, v)] = {1, k_max}
    b, v, ls = grid.scale_l
    for l in ls:
        scaling[(b, l, v)] = {1, k_max}
    results: dict = {}
    measure_group(key, scaling, results)
    for point in grid.main:
        ks = {k for k in (1, *grid.multi_k) if (*point, k, "read-once") not in results}
        if ks:
            measure_group(key, {point: ks}, results)
    return results


# ----------------------------------------------------------------------------- tables


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt_ms(ms: float) -> str:
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def timing_tables(grid: Grid, results: dict) -> list[str]:
    out = []
    # Main table, chains.
    header = ["B", "L", "V", "read-once ms"]
    for name in CHAIN:
        header += [f"{name} ms", f"{name} ×"]
    rows = []
    for b, l, v in grid.main:
        base = results[(b, l, v, 1, "read-once")]
        row: list[object] = [b, l, v, fmt_ms(base)]
        for name in CHAIN:
            t = results[(b, l, v, 1, name)]
            row += [fmt_ms(t), f"{t / base:.1f}"]
        rows.append(row)
    out.append(
        "#### Time per call, chain verifiers (K = 1; goal: ≤ 2× read-once)\n\n"
        + table(header, rows)
    )
    # Main table, multi-path.
    header = ["B", "K", "L", "V", "read-once ms"]
    for name in MULTIPATH:
        header += [f"{name} ms", f"{name} ×"]
    rows = []
    for b, l, v in grid.main:
        for k in grid.multi_k:
            base = results[(b, l, v, k, "read-once")]
            row = [b, k, l, v, fmt_ms(base)]
            for name in MULTIPATH:
                t = results[(b, l, v, k, name)]
                row += [fmt_ms(t), f"{t / base:.1f}"]
            rows.append(row)
    out.append(
        "#### Time per call, multi-path verifiers (goal: ≤ 4× read-once)\n\n" + table(header, rows)
    )
    # Goal summary over the main grid.
    rows = []
    for kind, names, ks in (("chain", CHAIN, (1,)), ("multipath", MULTIPATH, grid.multi_k)):
        for name in names:
            ratios = [
                results[(b, l, v, k, name)] / results[(b, l, v, k, "read-once")]
                for b, l, v in grid.main
                for k in ks
            ]
            met = sum(r <= GOAL[kind] for r in ratios)
            rows.append(
                [
                    name,
                    f"≤ {GOAL[kind]:.0f}×",
                    f"{met} / {len(ratios)}",
                    f"{min(ratios):.1f}",
                    f"{statistics.median(ratios):.1f}",
                    f"{max(ratios):.1f}",
                ]
            )
    out.append(
        "#### Goal summary over the main grid (ratio = verifier / read-once)\n\n"
        + table(["verifier", "goal", "points meeting it", "min ×", "median ×", "max ×"], rows)
    )
    # Scaling tables.
    k_max = max(grid.multi_k)
    for axis, (b, fixed, values) in (("V", grid.scale_v), ("L", grid.scale_l)):
        header = ["verifier", "K"] + [f"{axis} = {x}" for x in values]
        header += [f"t({y})/t({x})" for x, y in itertools.pairwise(values)]
        rows = []
        for k, names in ((1, ("read-once", *CHAIN)), (k_max, ("read-once", *MULTIPATH))):
            for name in names:
                ts = []
                for x in values:
                    l, v = (fixed, x) if axis == "V" else (x, fixed)
                    ts.append(results[(b, l, v, k, name)])
                row = [name, k, *(fmt_ms(t) for t in ts)]
                row += [f"{t1 / t0:.2f}" for t0, t1 in itertools.pairwise(ts)]
                rows.append(row)
        ideal = ", ".join(
            f"{y / x:.2f}" if axis == "V" else "read-once row"
            for x, y in itertools.pairwise(values)
        )
        fixed_desc = f"B = {b}, L = {fixed}" if axis == "V" else f"B = {b}, V = {fixed}"
        note = (
            f"linear in V gives ratios {ideal}"
            if axis == "V"
            else "linear in the data read gives the read-once row's ratios ((2L+1) rows per path)"
        )
        out.append(f"#### Time (ms) vs {axis} at {fixed_desc} ({note})\n\n" + table(header, rows))
    return out


# ----------------------------------------------------------------------------- primitives


def run_primitives(grid: Grid, key) -> str:
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
    }
    times = time_ms({label: (op, (k_op, x)) for label, op in ops.items()})
    base = times["sum over V (read once)"]
    rows = [[label, fmt_ms(t), f"{t / base:.1f}"] for label, t in times.items()]
    return f"#### Single operations on one [B, V] = [{b}, {v}] float32 row set\n\n" + table(
        ["operation", "ms", "× sum"], rows
    )


# ----------------------------------------------------------------------------- efficiency


@functools.cache
def _jitted(name: str, replacement: bool) -> Callable:
    fn = verify.get(name)
    if name == "specinfer":
        return jax.jit(lambda key, t, q, p: fn(key, t, q, p, replacement=replacement))
    return jax.jit(fn)


_sample = jax.jit(
    synthetic.sample_draft, static_argnums=(1, 2, 3, 4), static_argnames="replacement"
)


def efficiency_row(key, draft: synthetic.Draft, name: str, replacement: bool) -> list[float]:
    """``[E[tau] + 1, its standard error, P(tau >= 1)]`` of one verifier on one draft batch."""
    result = _jitted(name, replacement)(key, *draft)
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
    header = ["family", "K", "verifier", "E[τ]+1", "SE", "P(τ≥1)", "root bound", "bound kind"]
    header.append("bound − P(τ≥1)")
    body = [
        [
            f,
            k,
            name,
            f"{eff:.3f}",
            f"{se:.3f}",
            f"{p1:.4f}",
            f"{bound:.4f}",
            kind,
            f"{bound - p1:+.4f}",
        ]
        for f, k, name, eff, se, p1, bound, kind in out
    ]
    note = (
        f"V = {grid.eff_vocab}, L = {grid.eff_length}, {rows} rows per family; largest standard "
        f"error of E[τ]+1: {max(row[4] for row in out):.4f}. Chains (K = 1) are path 0 of the "
        f"i.i.d. draft; multi-path drafts with K < {k_max} are the first K of {k_max} sampled "
        f"paths. † the without-replacement bound is the mean over the first {bound_rows} rows "
        "only (± its standard error; its quadrature is slow); the other bounds use all rows. "
        "greedy is left out: it is the temperature-0 rule, not lossless for these targets."
    )
    return "#### Block efficiency and root acceptance vs the optimal bound\n\n" + (
        note + "\n\n" + table(header, body)
    )


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
    RUN.min_time = grid.min_time
    unknown = set(_PARTS.value) - {"timing", "primitives", "efficiency"}
    if unknown:
        raise app.UsageError(f"unknown --parts {sorted(unknown)}")
    load_start = os.getloadavg()[0]
    digest = code_digest()
    key = jax.random.key(_SEED.value)
    k_time, k_prim, k_eff = jax.random.split(key, 3)
    start = time.perf_counter()
    sections = [
        f"### Verifier benchmark ({grid_name} grid)\n\n"
        f"`python {' '.join(['scripts/bench_verify.py', *sys.argv[1:]])}` on {benchlib.machine()}, "
        f"{datetime.date.today().isoformat()}; `specjax/verify` sources sha256 {digest}."
    ]
    if "timing" in _PARTS.value:
        sections += timing_tables(grid, run_timing(grid, k_time))
    if "primitives" in _PARTS.value:
        sections.append(run_primitives(grid, k_prim))
    if "efficiency" in _PARTS.value:
        sections.append(run_efficiency(grid, k_eff))
    wall = time.perf_counter() - start
    sections.append(
        f"Wall time {wall:.0f} s ({RUN.compile_s:.0f} s of it compiling, "
        f"{RUN.timed_calls} timed calls); 1-minute load average {load_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end (above {os.cpu_count()} means other jobs shared "
        "the CPUs)."
    )
    if code_digest() != digest:
        sections.append(
            f"**Warning**: the `specjax/verify` sources changed during the run (now "
            f"{code_digest()}); the modules imported at the start were measured."
        )
    text = "\n\n".join(sections) + "\n"
    print(text)
    if _OUTPUT.value:
        with open(_OUTPUT.value, "w") as f:
            f.write(text)


if __name__ == "__main__":
    app.run(main)
