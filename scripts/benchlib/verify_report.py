"""``bench_verify.py``'s Markdown: time per call against read-once, scaling with V and L, single
operations, and block efficiency against the optimal bound."""

from __future__ import annotations

import itertools
import statistics

from benchlib import table
from benchlib.verify_inputs import MULTIPATH, TIMED_CHAIN

GOAL = {"chain": 2.0, "multipath": 4.0}


def fmt_ms(ms: float) -> str:
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def timing_tables(grid, results: dict) -> list[str]:
    out = []
    # Main table, chains.
    header = ["B", "L", "V", "read-once ms"]
    for name in TIMED_CHAIN:
        header += [f"{name} ms", f"{name} ×"]
    rows = []
    for b, l, v in grid.main:
        base = results[(b, l, v, 1, "read-once")]
        row: list[object] = [b, l, v, fmt_ms(base)]
        for name in TIMED_CHAIN:
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
    for kind, names, ks in (("chain", TIMED_CHAIN, (1,)), ("multipath", MULTIPATH, grid.multi_k)):
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
    for axis, scale in (("V", grid.scale_v), ("L", grid.scale_l)):
        if scale is None:
            continue
        b, fixed, values = scale
        header = ["verifier", "K"] + [f"{axis} = {x}" for x in values]
        header += [f"t({y})/t({x})" for x, y in itertools.pairwise(values)]
        rows = []
        for k, names in ((1, ("read-once", *TIMED_CHAIN)), (k_max, ("read-once", *MULTIPATH))):
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


def baseline_table(grid, results: dict, commit: str) -> str:
    """Every verifier against the same verifier of ``commit`` (``--baseline``), × read-once."""
    rows = []
    for b, l, v in grid.main:
        for k, names in ((1, TIMED_CHAIN), *((k, MULTIPATH) for k in grid.multi_k)):
            base = results[(b, l, v, k, "read-once")]
            for name in names:
                t = results[(b, l, v, k, name)]
                old = results.get((b, l, v, k, f"{name}@baseline"))
                row = [name, b, k, l, v, fmt_ms(base), fmt_ms(t), f"{t / base:.2f}"]
                row += ["—"] * 3 if old is None else [fmt_ms(old), f"{old / base:.2f}"]
                row += [] if old is None else [f"{t / old:.2f}"]
                rows.append(row)
    header = ["verifier", "B", "K", "L", "V", "read-once ms", "now ms", "now ×"]
    header += ["baseline ms", "baseline ×", "now / baseline"]
    return f"#### Against {commit} (same rounds, same arrays; × = time / read-once)\n\n" + table(
        header, rows
    )


def primitives_table(b: int, v: int, times: dict[str, float]) -> str:
    base = times["sum over V (read once)"]
    rows = [[label, fmt_ms(t), f"{t / base:.1f}"] for label, t in times.items()]
    return f"#### Single operations on one [B, V] = [{b}, {v}] float32 row set\n\n" + (
        table(["operation", "ms", "× sum"], rows)
    )


def efficiency_table(grid, out: list, rows: int, bound_rows: int) -> str:
    """``out``: ``[family, K, verifier, E[tau] + 1, SE, P(tau >= 1), bound, bound kind]``."""
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
        f"i.i.d. draft; multi-path drafts with K < {max(grid.eff_k)} are the first K of "
        f"{max(grid.eff_k)} sampled paths. † the without-replacement bound is the mean over the "
        f"first {bound_rows} rows only (± its standard error; its quadrature is slow); the other "
        "bounds use all rows. greedy is left out: it is the temperature-0 rule, not lossless for "
        "these targets."
    )
    return "#### Block efficiency and root acceptance vs the optimal bound\n\n" + (
        note + "\n\n" + table(header, body)
    )
