"""``bench_decode.py``'s results and their Markdown: per pair and temperature, the goal checks
and the loop overhead."""

from __future__ import annotations

import dataclasses
import datetime

import numpy as np

import benchlib
from benchlib.decode_pairs import Case, Pair, order
from specjax.decode import Metrics

OVERHEAD_GOAL = 0.10


@dataclasses.dataclass
class Row:
    pair: str
    temperature: float
    case: Case
    metrics: Metrics
    ar_seconds: float
    compile_s: float
    same_as_ar: bool | None
    runs: int

    @property
    def be_se(self) -> float:
        """Standard error of the block efficiency (per-step tau treated as independent)."""
        hist = np.asarray(self.metrics.accepted_length_histogram, np.float64)
        n = hist.sum()
        if n < 2:
            return float("nan")
        tau = np.arange(hist.size)
        mean = (hist * tau).sum() / n
        var = (hist * (tau - mean) ** 2).sum() / (n - 1)
        return float(np.sqrt(var / n))

    @property
    def speedup(self) -> float:
        return self.ar_seconds / self.metrics.seconds


@dataclasses.dataclass
class Results:
    """What a run measured: a row per configuration, and the loop overheads as
    ``(pair, temperature, case, measure_overhead's dict)``."""

    rows: list[Row] = dataclasses.field(default_factory=list)
    overheads: list[tuple] = dataclasses.field(default_factory=list)


def results_table(
    pair: Pair, temperature: float, rows: list[Row], baseline: dict, max_new: int
) -> str:
    greedy = temperature == 0
    header = ["verifier", "K", "L", "block eff.", "± SE", "accept.", "tok/s", "speedup"]
    header += ["steps", "runs", "compile s"] + (["= AR"] if greedy else [])
    body = []
    for r in sorted(rows, key=lambda r: order(r.case)):
        m = r.metrics
        line = [r.case.verifier, r.case.k, r.case.l, f"{m.block_efficiency:.2f}"]
        line += [f"{r.be_se:.2f}", f"{m.acceptance_rate:.2f}", f"{m.tokens_per_second:.1f}"]
        line += [f"{r.speedup:.2f}×", m.target_forwards, r.runs, f"{r.compile_s:.1f}"]
        if greedy:
            line.append("yes" if r.same_as_ar else "**no**")
        body.append(line)
    lo, hi = baseline["tok_s_range"]
    title = (
        f"#### {pair.name}, temperature {temperature:g}\n\n"
        f"{pair.description}; {pair.prompt_note}; batch {len(pair.prompts)}, "
        f"{max_new} new tokens per row. Autoregressive baseline: "
        f"**{baseline['tok_s']:.1f} tok/s** (median of {baseline['runs']} runs interleaved with "
        f"the rows below; range {lo:.1f}–{hi:.1f}; compile {baseline['compile_s']:.1f} s)."
    )
    if greedy:
        title += (
            " `= AR`: the speculative tokens equal the autoregressive ones (temperature 0 is "
            "deterministic; every verifier must reproduce them)."
        )
    return title + "\n\n" + benchlib.table(header, body)


def _cmp(a: Row, b: Row) -> tuple[str, str]:
    """(a - b ± SE, verdict) for 'a >= b'."""
    diff = a.metrics.block_efficiency - b.metrics.block_efficiency
    se = float(np.hypot(a.be_se, b.be_se))
    se = 0.0 if np.isnan(se) else se
    if diff >= 0:
        verdict = "met"
    elif diff >= -2 * se:
        verdict = "within 2 SE"
    else:
        verdict = "**not met**"
    return f"{diff:+.2f} ± {se:.2f}", verdict


def _against(rows: list[Row], verifier: str, ks: tuple[int, ...], baseline: str):
    """``(row, its baseline row)`` for each row of ``verifier`` at K in ``ks`` whose pair and
    temperature have a row of ``baseline`` (K = 1) at the same L, in table order."""
    index = {(r.pair, r.temperature, r.case): r for r in rows}
    for r in sorted(index.values(), key=lambda r: (r.pair, r.temperature, order(r.case))):
        if r.case.verifier == verifier and r.case.k in ks:
            base = index.get((r.pair, r.temperature, Case(baseline, 1, r.case.l)))
            if base:
                yield r, base


def _section(title: str, header: list[str], lines: list[list], empty: str) -> str:
    if not lines:
        return f"**{title}**: {empty}"
    verdicts = [line[-1] for line in lines]
    met = sum(v == "met" for v in verdicts)
    near = sum(v == "within 2 SE" for v in verdicts)
    return (
        f"**{title}**: met at {met} of {len(lines)} points, within two standard errors at "
        f"{near} more.\n\n" + benchlib.table(header, lines)
    )


def goal_checks(rows: list[Row]) -> str:
    e = lambda r: f"{r.metrics.block_efficiency:.2f}"
    lines = [
        [r.pair, f"{r.temperature:g}", r.case.l, e(tok), e(r), *_cmp(r, tok)]
        for r, tok in _against(rows, "block", (1,), "token")
    ]
    out = [
        _section(
            "BV ≥ token (block efficiency, K = 1)",
            ["pair", "T", "L", "token", "block", "block − token", "verdict"],
            lines,
            "not measured (needs token and block).",
        )
    ]
    lines = [
        [r.pair, f"{r.temperature:g}", r.case.k, r.case.l, e(bv), e(r), *_cmp(r, bv)]
        for r, bv in _against(rows, "gbv", (2, 3), "block")
    ]
    out.append(
        _section(
            "GBV (K = 2, 3) ≥ BV (K = 1) at the same L",
            ["pair", "T", "K", "L", "block", "gbv", "gbv − block", "verdict"],
            lines,
            "not measured (needs gbv at K = 2 or 3 and block; the n-gram pair has K = 1 only).",
        )
    )
    fast = [r for r in rows if r.pair == "smollm2" and r.metrics.block_efficiency >= 2]
    lines = [
        [
            f"{r.temperature:g}",
            r.case.label,
            e(r),
            f"{r.speedup:.2f}×",
            "met" if r.speedup > 1 else "**not met**",
        ]
        for r in sorted(fast, key=lambda r: (r.temperature, order(r.case)))
    ]
    title = "**Speculative faster than autoregressive on SmolLM2 wherever block efficiency ≥ 2**"
    if lines:
        met = sum(line[-1] == "met" for line in lines)
        out.append(
            f"{title}: met at {met} of {len(lines)} configurations.\n\n"
            + benchlib.table(["T", "configuration", "block eff.", "speedup", "verdict"], lines)
        )
    else:
        out.append(
            f"{title}: no SmolLM2 configuration reached block efficiency 2 (or the pair was not "
            "run)."
        )
    return "#### Goal checks\n\n" + "\n\n".join(out)


def overhead_table(overheads: list, hlo: dict[str, dict]) -> str:
    header = ["pair", "T", "configuration", "steps", "generate s", "prefill ms"]
    header += ["propose ms", "forward ms", "verify ms", "Σ model calls s", "overhead"]
    header += ["dispatch ms", "overhead w/o dispatch", "step ms", "Σ steps s", "loop overhead"]
    body = []
    ms = lambda d, k: f"{d[k] * 1e3:.2f}" if k in d else "—"
    for pair, t, case, d in overheads:
        forward = ms(d, "forward") if "forward" in d else ms(d, "decode") + " (1 token)"
        body.append(
            [
                pair,
                f"{t:g}",
                case.label,
                d["steps"],
                f"{d['generate']:.3f}",
                ms(d, "prefill"),
                ms(d, "propose"),
                forward,
                ms(d, "verify"),
                f"{d['model_sum']:.3f}",
                f"{d['overhead']:+.1%}",
                ms(d, "dispatch"),
                f"{d['net_overhead']:+.1%}",
                ms(d, "step"),
                f"{d['step_sum']:.3f}",
                f"{d['loop_overhead']:+.1%}",
            ]
        )
    met = sum(d["overhead"] < OVERHEAD_GOAL for *_, d in overheads)
    facts = "; ".join(
        f"{name}: {f['while']} `while` op(s), {f['host']} host-communication ops"
        if f
        else f"{name}: not inspected"
        for name, f in hlo.items()
    )
    return (
        "#### Loop overhead (whole generation vs its model calls timed alone)\n\n"
        "`generate` is ONE call of ONE compiled XLA executable per generation (prefill + "
        "`lax.while_loop`); the host waits once for the final state, with no host round trip per "
        f"step (optimized HLO of the first configuration per pair: {facts}). "
        "Σ model calls = prefill + steps × (propose + tree forward + verify), each a jitted call "
        "timed alone on the state after prefill (median; the forward donates the target cache "
        "and rolls it back, as bench_model does; verify = logits → probabilities → verifier). "
        "Overhead = generate / Σ model calls − 1, i.e. what the loop adds on top of the model "
        "calls: token commit, KV-cache compaction, draft-cache commit, counters and the loop "
        "itself. Each call timed alone also pays one dispatch from Python (`dispatch`: a "
        "jitted call taking the same model, drafter and state pytrees and doing nothing, timed "
        "in the same rounds), which the fused loop does not; `overhead w/o dispatch` subtracts "
        "it from every call, an estimate of the loop's own cost where the model calls are so "
        "cheap (the Shakespeare pair) that dispatch dominates them. "
        "The last columns time the jitted standalone step instead (same state): "
        "loop overhead = generate / (prefill + steps × step) − 1 isolates the `while_loop` from "
        f"the step's own bookkeeping. Goal: overhead < {OVERHEAD_GOAL:.0%} (met at {met} of "
        f"{len(overheads)}). Negative values mean the fused loop is faster than the calls "
        "dispatched one by one.\n\n" + benchlib.table(header, body)
    )


def header(grid: dict, settings: dict, digest: str, quick: bool) -> str:
    """The report's first paragraph: command, machine, date, code, grid and method.
    ``settings``: the flags max_new_tokens, batch, seed, warmup, repeats, min_time, max_repeats."""
    s = settings
    return (
        f"### Decoding benchmark{' (--quick grid)' if quick else ''}\n\n"
        f"`{benchlib.command()}` on {benchlib.machine(verbose=True)}, "
        f"{datetime.date.today().isoformat()}; `specjax` sources "
        f"sha256 {digest}. Grid: temperatures {grid['temperatures']}, verifiers "
        f"{grid['verifiers']} (greedy at temperature 0 only), K {grid['paths']} (multi-path "
        f"verifiers with the model drafter; K = 1 otherwise), L {grid['lengths']}, "
        f"{s['max_new_tokens']} new tokens, batch {s['batch']}, seed {s['seed']}; each "
        f"generation run {s['warmup']} time(s) untimed, then timed in rounds interleaved with "
        f"the autoregressive baseline (at least {s['repeats']}, more until a configuration's "
        f"rounds take about {s['min_time']:g} s, at most {s['max_repeats']}; `runs` column), "
        "median. Block efficiency = tokens per target "
        "call; acceptance = accepted / proposed draft tokens on the followed path; ± SE = the "
        "standard error of the block efficiency from the accepted-length histogram; speedup = "
        "baseline time / speculative time (compile excluded)."
    )
