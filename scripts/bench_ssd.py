r"""SSD hit rate, bonus-guess accuracy and rounds served from the cache against the branch budget C
and the Saguaro factor, on the Shakespeare pair and on SmolLM2 with its self-draft.

  python scripts/bench_ssd.py --output=/tmp/ssd.md --plot=benchmarks/ssd_hit_rate.png
  python scripts/bench_ssd.py --quick

No timings: on this 2-core CPU the draft and the target share the cores, so SSD's gain (drafting
hidden behind verification) cannot show; scripts/simulate_ssd.py turns the measured rates and
per-call latencies into predicted speedups. Every row also checks that SSD at temperature 0 emits
the autoregressive tokens.
"""

from __future__ import annotations

import datetime
import sys
import time

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
from absl import app, flags, logging
from benchlib import plots

from specjax.decode import DecodeConfig, generate
from specjax.decode.ssd import generate_ssd, ssd_rates
from specjax.decode.ssd.drafter import SSDDrafter
from specjax.decode.ssd.fanout import parse_fan_out
from specjax.decode.ssd.speculation import SSDConfig
from specjax.models import load_pair as load_shipped_pair
from specjax.sampling import SamplingParams

_PAIRS = flags.DEFINE_list("pairs", ["shakespeare", "smollm2"], "shakespeare and/or smollm2.")
_BUDGETS = flags.DEFINE_list("budgets", ["5", "10", "20", "40"], "Branch budgets C.")
_SAGUARO = flags.DEFINE_list("saguaro", ["1.0", "0.5"], "Saguaro factors (1 = off).")
_FAN_OUTS = flags.DEFINE_list("fan_outs", ["geometric", "uniform"], "Fan-out families.")
_TEMPERATURES = flags.DEFINE_list("temperatures", ["0", "1"], "Sampling temperatures.")
_NEW_TOKENS = flags.DEFINE_integer("new_tokens", 96, "Tokens generated per prompt.")
_DRAFT_LEN = flags.DEFINE_integer("draft_len", 4, "L.")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the Markdown report to this file.")
_PLOT = flags.DEFINE_string("plot", None, "PNG of hit rate against C (needs matplotlib).")
_QUICK = flags.DEFINE_bool("quick", False, "Smoke run: Shakespeare, two budgets, 32 tokens.")

PROMPTS = {
    "shakespeare": ["ROMEO:\n", "JULIET:\nO Romeo, Romeo", "HAMLET:\nTo be, or not"],
    "smollm2": [
        "def fibonacci(n):\n    ",
        "The capital of France is",
        "Speculative decoding makes a large model faster by",
    ],
}


def load_pair(name: str):
    """``(target, draft, tokenizer)`` PureModels: the committed Shakespeare pair, or SmolLM2
    with its first 8 layers as the self-draft."""
    if name == "shakespeare":
        shipped = load_shipped_pair("shakespeare")
    else:
        shipped = load_shipped_pair("smollm2_self", draft_layers=8)
    return shipped.target, shipped.draft, shipped.tokenizer


def rows_for(name: str, quick: bool) -> list[tuple[str, int, float, float]]:
    """(fan-out family, C, Saguaro factor, temperature) per row."""
    budgets = ["5", "20"] if quick else _BUDGETS.value
    grid = []
    for temperature in map(float, _TEMPERATURES.value):
        for family in _FAN_OUTS.value:
            for c in map(int, budgets):
                factors = [1.0] if temperature == 0 else map(float, _SAGUARO.value)
                grid += [(family, c, f, temperature) for f in factors]
    return grid


def measure(name: str, quick: bool) -> list[list[str]]:
    target, draft, tokenizer = load_pair(name)
    l_len, new = _DRAFT_LEN.value, (32 if quick else _NEW_TOKENS.value)
    prompts = [tokenizer.encode(p) for p in PROMPTS[name]]
    body = []
    for family, budget, factor, temperature in rows_for(name, quick):
        if family == "uniform" and budget % (l_len + 1):
            continue
        params = SamplingParams(temperature)
        verifier = "greedy" if temperature == 0 else "block"
        cfg = DecodeConfig(verifier, params, new)
        fan = parse_fan_out(family, l_len, budget, 0.8)
        drafter = SSDDrafter(draft, ssd=SSDConfig(fan_out=fan, saguaro=factor), sampling=params)
        out = generate_ssd(target, prompts, cfg, drafter, seed=0)
        same = "—"
        if temperature == 0:
            ar = generate(target, prompts, DecodeConfig("autoregressive", params, new))
            same = "yes" if ar.tokens == out.tokens else "**NO**"
        r = ssd_rates(out.ssd)
        body.append(
            [
                name,
                f"{temperature:g}",
                family,
                ",".join(map(str, fan)),
                str(budget),
                f"{factor:g}",
                f"{r['ssd_hit_rate']:.3f}",
                f"{r['ssd_bonus_accuracy']:.3f}",
                f"{r['ssd_k_coverage']:.3f}",
                f"{r['ssd_served_from_cache']:.3f}",
                f"{out.metrics.block_efficiency:.2f}",
                f"{r['ssd_accepted_length_from_cache']:.2f}",
                f"{r['ssd_accepted_length_from_backup']:.2f}",
                same,
            ]
        )
        logging.warning("%s", " | ".join(body[-1]))
    return body


HEAD = [
    "pair", "T", "fan-out", "F_0..F_L", "C", "Saguaro", "hit rate", "bonus acc.", "k coverage",
    "served from cache", "block eff.", "accepted (cache)", "accepted (backup)", "= AR",
]  # fmt: skip


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    t0 = time.perf_counter()
    pairs = ["shakespeare"] if _QUICK.value else _PAIRS.value
    body = [row for name in pairs for row in measure(name, _QUICK.value)]
    header = (
        f"`{benchlib.command()}` on "
        f"{benchlib.machine()}; {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; "
        f"L = {_DRAFT_LEN.value}; total {time.perf_counter() - t0:.0f} s."
    )
    report = header + "\n\n" + benchlib.markdown(HEAD, body, left=4) + "\n"
    benchlib.write_report(report, _OUTPUT.value)
    if _PLOT.value:
        plots.ssd_hit_rate(body, _PLOT.value)
    if any("NO" in row[-1] for row in body):
        sys.exit("error: SSD at temperature 0 differed from autoregressive decoding")


if __name__ == "__main__":
    app.run(main)
