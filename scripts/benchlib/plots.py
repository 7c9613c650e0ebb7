"""The benchmarks' PNG plots (matplotlib, the ``[train]`` extra)."""

from __future__ import annotations

import itertools
import pathlib

import numpy as np

from benchlib.decode_pairs import ALL_VERIFIERS, Pair, representative
from benchlib.decode_report import Row


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt, fig, path, **options) -> str:
    fig.savefig(path, **options)
    plt.close(fig)
    return str(path)


# ----------------------------------------------------------------------------- bench_decode


def decode_plots(pairs: dict[str, Pair], rows: list[Row], grid: dict, plot_dir: str) -> list[str]:
    """Per pair, ``decode_block_efficiency_<pair>.png`` (block efficiency vs L per verifier, a
    panel per temperature x K) and ``decode_histogram_<pair>.png`` (accepted lengths of each
    verifier's representative configuration); the paths written (none without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return []
    out_dir = pathlib.Path(plot_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, pair in pairs.items():
        mine = [r for r in rows if r.pair == name]
        if mine:
            fig = _block_efficiency(plt, name, mine)
            written.append(_save(plt, fig, out_dir / f"decode_block_efficiency_{name}.png"))
            fig = _histograms(plt, pair, mine, grid)
            written.append(_save(plt, fig, out_dir / f"decode_histogram_{name}.png"))
    return written


COLORS = {v: f"C{i}" for i, v in enumerate(ALL_VERIFIERS)}


def _block_efficiency(plt, name: str, mine: list[Row]):
    temps = sorted({r.temperature for r in mine})
    ks = sorted({r.case.k for r in mine})
    fig, axes = plt.subplots(
        len(temps),
        len(ks),
        figsize=(3.6 * len(ks) + 1.5, 3.0 * len(temps) + 0.6),
        squeeze=False,
        sharey=True,
    )
    for (i, t), (j, k) in itertools.product(enumerate(temps), enumerate(ks)):
        ax = axes[i][j]
        for n, v in enumerate(ALL_VERIFIERS):
            pts = sorted(
                (r.case.l, r.metrics.block_efficiency, r.be_se)
                for r in mine
                if r.temperature == t and r.case.k == k and r.case.verifier == v
            )
            if pts:
                ls, es, ses = zip(*pts, strict=True)
                x = np.asarray(ls) + 0.08 * (n - 2.5)  # dodge: equal values stay visible
                ax.errorbar(x, es, yerr=ses, marker="o", capsize=2, label=v, color=COLORS[v])
        ax.axhline(1.0, color="gray", ls="--", lw=0.8)
        ax.set_title(f"T = {t:g}, K = {k}")
        ax.set_xlabel("draft length L")
        all_l = sorted({r.case.l for r in mine})
        ax.set_xticks(all_l)
        ax.set_xlim(all_l[0] - 1, all_l[-1] + 1)
        ax.grid(alpha=0.3)
        if j == 0:
            ax.set_ylabel("block efficiency (tokens / target call)")
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="upper right", fontsize="small")
    fig.suptitle(f"Block efficiency per verifier: {name}", fontsize="medium")
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    return fig


def _histograms(plt, pair: Pair, mine: list[Row], grid: dict):
    temps = sorted({r.temperature for r in mine})
    verifiers = [v for v in ALL_VERIFIERS if any(r.case.verifier == v for r in mine)]
    fig, axes = plt.subplots(
        len(temps),
        len(verifiers),
        figsize=(3.0 * len(verifiers) + 1.0, 2.6 * len(temps) + 0.6),
        squeeze=False,
    )
    for (i, t), (j, v) in itertools.product(enumerate(temps), enumerate(verifiers)):
        ax = axes[i][j]
        case = representative(pair, v, grid["paths"], grid["lengths"])
        row = next((r for r in mine if r.temperature == t and r.case == case), None)
        if row is None:
            ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(f"{v}, T = {t:g}")
            ax.set_axis_off()
            continue
        hist = np.asarray(row.metrics.accepted_length_histogram, np.float64)
        ax.bar(np.arange(hist.size), hist / max(hist.sum(), 1), color=COLORS[v])
        ax.set_title(f"{v} K={case.k} L={case.l}, T = {t:g}", fontsize="small")
        ax.set_xlabel("accepted length τ")
        ax.set_xticks(np.arange(hist.size))
        if j == 0:
            ax.set_ylabel("fraction of steps")
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"Accepted-length histogram: {pair.name}", fontsize="medium")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- bench_peers


def peer_speeds(labels: list[str], ours: list[float], peer: list[float], n: int, path: str):
    """Horizontal bars of tokens/s per row, specjax next to transformers (log scale); the path
    written, or None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    y = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(labels) + 1.5))
    ax.barh(y - 0.2, ours, 0.4, label="specjax")
    ax.barh(y + 0.2, peer, 0.4, label="transformers")
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel(f"tokens/s (batch 1, fp32, greedy, {n} new tokens)")
    ax.legend()
    fig.tight_layout()
    return _save(plt, fig, path, dpi=120)


# ----------------------------------------------------------------------------- bench_ssd


def ssd_hit_rate(body: list[list[str]], path: str) -> str:
    """SSD cache hit rate against the branch budget C, a panel per temperature, a line per pair,
    fan-out family and Saguaro factor (``body``: bench_ssd's table rows)."""
    plt = pyplot()
    if plt is None:
        raise ImportError("the SSD plot needs matplotlib (pip install -e '.[train]')")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, temperature in zip(axes, ("0", "1"), strict=True):
        lines = {}
        for row in body:
            if row[1] == temperature:
                key = f"{row[0]} {row[2]} x={row[5]}"
                lines.setdefault(key, []).append((int(row[4]), float(row[6])))
        for key, points in sorted(lines.items()):
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", label=key)
        ax.set_title(f"temperature {temperature}")
        ax.set_xlabel("branches per row C")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("SSD cache hit rate")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return _save(plt, fig, path, dpi=120)


# ----------------------------------------------------------------------------- bench_widths


def width_traces(traces: dict[str, dict], window: int, path: str) -> str:
    """Width over time, a panel per drafter, against the generated token: the width of the step
    that produced each token (grey), the tokens per step averaged over ``window`` steps (line),
    and where the trace has ``fixed_tokens``, the same for drafting at the full width every
    step, i.e. the drafter's acceptance along the answer (``traces``: bench_widths'
    ``{name: {"widths", "tokens", "choices", "fixed_tokens"}}``)."""
    plt = pyplot()
    if plt is None:
        raise ImportError("the width plot needs matplotlib (pip install -e '.[train]')")
    fig, axes = plt.subplots(len(traces), 1, figsize=(9, 2.4 * len(traces)), squeeze=False)
    kernel = np.ones(window) / window

    def per_token(tokens):  # [steps] -> (first token of each step, windowed mean tokens/step)
        tokens = np.asarray(tokens, np.float64)
        start = np.concatenate([[0], np.cumsum(tokens)[:-1]])
        mean = np.convolve(tokens, kernel, mode="valid") if len(tokens) >= window else tokens
        return start, start[len(start) - len(mean) :], mean

    for ax, (name, trace) in zip(axes[:, 0], traces.items(), strict=True):
        start, at, mean = per_token(trace["tokens"])
        ax.bar(start, trace["widths"], width=np.asarray(trace["tokens"]), align="edge",
               color="0.8", label="width taken")  # fmt: skip
        ax.plot(at, mean, color="C0", label=f"tokens per step (mean of {window})")
        if "fixed_tokens" in trace:
            _, at, mean = per_token(trace["fixed_tokens"])
            ax.plot(at, mean, color="C1", ls="--",
                    label=f"fixed width: tokens per step (mean of {window})")  # fmt: skip
        ax.set_yticks(sorted({0, *trace["choices"], 1}))
        ax.set_title(f"{name}: widths {tuple(trace['choices'])}", fontsize=9)
        ax.set_xlim(0, float(np.sum(trace["tokens"])))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("generated token")
    fig.tight_layout()
    return _save(plt, fig, path, dpi=120)
