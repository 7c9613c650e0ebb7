"""The report's PNGs, one per claim group, from each :class:`~reproducelib.claims.Section`'s
``data`` (matplotlib, the ``[train]`` extra; nothing is drawn without it)."""

from __future__ import annotations

import pathlib

import numpy as np
from benchlib.plots import pyplot

from reproducelib.claims import Section

NAMES = {
    1: "reproduce_bv_toy.png",
    2: "reproduce_bv_vs_token.png",
    3: "reproduce_gbv.png",
    4: "reproduce_multidraft.png",
    5: "reproduce_ssd.png",
}


def _toy(plt, data):
    fig, ax = plt.subplots(figsize=(5.5, 4))
    rows = np.asarray(data["lengths"], np.float64)
    for col, label, marker in (
        (1, "token", "o"),
        (2, "block (BV)", "s"),
        (3, "full-joint optimum", "^"),
    ):
        ax.plot(rows[:, 0], rows[:, col], marker=marker, label=label)
    ax.set_xlabel("draft length L")
    ax.set_ylabel("E[accepted tokens] (exact)")
    ax.set_title("BV toy example: p = (1/3, 2/3), q = (2/3, 1/3)", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def _bv_token(plt, data):
    labels, token, block = zip(*data["bars"], strict=True)
    y = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(labels) + 1.5))
    ax.barh(y - 0.2, token, 0.4, label="token verification")
    ax.barh(y + 0.2, block, 0.4, label="block verification")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("block efficiency (exact expectation on the same drafts)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig


def _gbv(plt, data):
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for pair, rows in data["pairs"].items():
        k, be, time = zip(*rows, strict=True)
        left.plot(k, be, marker="o", label=f"{pair} (decoding)")
        right.plot(k, time, marker="o", label=pair)
    for name, rows in data["synthetic"].items():
        k, be = zip(*rows, strict=True)
        left.plot(k, be, marker="x", ls="--", label=f"synthetic {name}")
    if data["single_step"]:  # the first logged pair's
        n, alpha = zip(*data["single_step"], strict=True)
        left.plot(n, alpha, marker=".", ls=":", label="exact single-step α(n) / α(1), logged")
    left.axhline(1.30, color="red", lw=0.8, ls="--", label="claim: +30%")
    left.axhline(1.0, color="gray", lw=0.8)
    left.set_xlabel("paths K")
    left.set_ylabel("GBV / BV block efficiency")
    left.legend(fontsize=7)
    right.axhline(0.85, color="red", lw=0.8, ls="--", label="claim: −15%")
    right.axhline(1.0, color="gray", lw=0.8)
    right.set_xlabel("paths K")
    right.set_ylabel("GBV / BV wall time per token (interleaved)")
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    return fig


def _multidraft(plt, data):
    ratios = data["ratios"]
    cols = min(len(ratios), 2)
    rows = -(-len(ratios) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False)
    for ax in axes.flat[len(ratios) :]:
        ax.set_visible(False)
    for ax, (where, by_name) in zip(axes.flat, ratios.items(), strict=False):
        names = list(by_name)
        ax.boxplot([by_name[k] for k in names], whis=(1, 99), showfliers=False)
        ax.set_xticks(range(1, len(names) + 1), names, rotation=20, fontsize=8)
        ax.axhline(1.0, color="red", lw=0.8, ls="--", label="the bound α*")
        ax.set_title(f"{where} drafts: α / α* per logged position", fontsize="medium")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, loc="lower left")
    for ax in axes[:, 0]:
        ax.set_ylabel("α / α* (whiskers: 1st–99th percentile)")
    fig.tight_layout()
    return fig


def _ssd(plt, data):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, temperature in zip(axes, (0.0, 1.0), strict=True):
        lines = {}
        for t, family, budget, factor, hit in data["rows"]:
            if t == temperature:
                lines.setdefault(f"{family}, Saguaro {factor:g}", []).append((budget, hit))
        for label, points in sorted(lines.items()):
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(f"temperature {temperature:g}")
        ax.set_xlabel("branches per row C")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("SSD cache hit rate")
    fig.tight_layout()
    return fig


DRAW = {1: _toy, 2: _bv_token, 3: _gbv, 4: _multidraft, 5: _ssd}


def write(sections: list[Section], plot_dir: str) -> dict[int, str]:
    """Draws every section's PNG into ``plot_dir``; {section number: path} (empty without
    matplotlib)."""
    plt = pyplot()
    if plt is None:
        return {}
    out_dir = pathlib.Path(plot_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for section in sections:
        if section.number in DRAW and section.data:
            fig = DRAW[section.number](plt, section.data)
            path = out_dir / NAMES[section.number]
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written[section.number] = str(path)
    return written
