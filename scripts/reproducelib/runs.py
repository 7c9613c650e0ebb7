"""Seeded generations of one configuration, their pooled block efficiency, and side-by-side
timing of two configurations (interleaved rounds: the CPU may be shared, so only ratios)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from specjax.decode import DecodeConfig, Generation, generate


def run_seeds(target, prompts, config: DecodeConfig, drafter, seeds: Sequence[int]) -> list:
    """One :func:`specjax.decode.generate` per seed (the first compiles)."""
    return [generate(target, prompts, config, drafter, seed=s) for s in seeds]


def pooled(runs: list[Generation]) -> tuple[float, float, int]:
    """(block efficiency, its standard error, steps) over every step of ``runs``: tokens per
    target call = mean(tau) + 1 from the summed accepted-length histograms (steps treated as
    independent for the SE)."""
    hist = np.sum([r.metrics.accepted_length_histogram for r in runs], axis=0).astype(np.float64)
    n = hist.sum()
    tau = np.arange(hist.size)
    mean = (hist * tau).sum() / n
    var = (hist * (tau - mean) ** 2).sum() / max(n - 1, 1)
    return float(mean + 1.0), float(np.sqrt(var / n)), int(n)


def root_acceptance(runs: list[Generation]) -> float:
    """P(tau >= 1): the share of steps that accepted the first draft token."""
    hist = np.sum([r.metrics.accepted_length_histogram for r in runs], axis=0)
    return float(1.0 - hist[0] / hist.sum())


def seconds_per_token(gen: Generation) -> float:
    """Wall seconds of the compiled programs per generated token (compilation excluded)."""
    return gen.metrics.seconds / max(gen.metrics.generated_tokens, 1)


def interleaved_ratio(target, prompts, configs, drafters, seed: int, rounds: int) -> dict:
    """Times configuration B against A in alternating rounds (A, B, A, B, ...; both compiled
    before), same prompts and seed.

    Args:
      configs, drafters: ``(A, B)`` pairs.

    Returns:
      ``ratio`` (median over rounds of B's seconds per token / A's, each round's two runs
      back to back), ``lo`` / ``hi`` (the range of the per-round ratios) and ``a_ms`` /
      ``b_ms`` (median milliseconds per token).
    """
    ratios, a_times, b_times = [], [], []
    for _ in range(rounds):
        a = seconds_per_token(generate(target, prompts, configs[0], drafters[0], seed=seed))
        b = seconds_per_token(generate(target, prompts, configs[1], drafters[1], seed=seed))
        ratios.append(b / a)
        a_times.append(a)
        b_times.append(b)
    return {
        "ratio": statistics.median(ratios),
        "lo": min(ratios),
        "hi": max(ratios),
        "a_ms": 1e3 * statistics.median(a_times),
        "b_ms": 1e3 * statistics.median(b_times),
    }
