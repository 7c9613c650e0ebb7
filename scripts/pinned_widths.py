r"""The widths a width policy takes when the width costs are pinned, prompt by prompt, and the
speed they imply (no clock): SmolLM2 with the n-gram drafter at temperature 0 on the prompts of
scripts/bench_widths.py.

A generation's steps per width at costs ``(1, c)`` (``DecodeConfig.width_costs``) give the speed
the policy reaches where a width-L step costs c one-token steps: ``n / (n_0 + c n_L)`` for
its n tokens, n_0 one-token and n_L drafting steps, against ``n / (c · steps)`` for fixed
drafting and 1 for autoregressive decoding. Greedy and timed by no clock, so it separates what
the policy chooses from timing noise. ``--true_cost`` prices the steps at another cost than
the policy was given: what a measurement that misread the cost costs (on the 2-core CPU a
width-6 step costs ~1.5-1.6 one-token steps; single measurements read 1.4-1.7 and more).

What-ifs side by side: ``--policies`` (:class:`~specjax.decode.widths.Goodput` variants,
``benchlib.width_policies``: e.g. ``default,reveal=0.6,reveal=1.01``, ``reveal`` being the
first-token estimate from which an n-gram row probes, above 1: never) and ``--hint_ngram``
(``NgramDrafter.hint_ngram``, the shortest match the policy counts as a proposal).
``--matches`` adds, per prompt, how often the first token of an n-gram proposal is the next
token of the greedy answer, by the length of its match. The flags of scripts/bench_widths.py
choose the prompts, lengths and policies and name the outputs (``--mtbench``, ``--only``,
``--new_tokens``, ``--draft_len``, ``--policies``, ``--output``, ``--json``).

  python scripts/pinned_widths.py --costs=1.35,1.5 --true_cost=1.6 --hint_ngram=1,2,3 --matches
  python scripts/pinned_widths.py --only=copy,mt90 --costs=2.4,2.8 --policies=default,reveal=1.01
"""

from __future__ import annotations

import dataclasses
import itertools
import json

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
from absl import app, flags
from bench_widths import policies, prompts  # its flags serve here (--mtbench, --policies, ...)
from benchlib.ngram_matches import match_hits

from specjax.decode import DecodeConfig, generate
from specjax.drafters import NgramDrafter
from specjax.models import load_pair
from specjax.sampling import SamplingParams

_COSTS = flags.DEFINE_list("costs", ["1.6", "2.0", "2.4", "2.8"], "pinned costs of a width-L step")
_TRUE = flags.DEFINE_float("true_cost", None, "price the steps at this cost (default: each c)")
_HINT = flags.DEFINE_list("hint_ngram", [], "what-if NgramDrafter.hint_ngram (default: as shipped)")
_MATCHES = flags.DEFINE_bool("matches", False, "first-token hit rates by match length")
FLAGS = flags.FLAGS


def counts(target, ids: list[int], costs: list[float], variants: list[tuple]) -> dict:
    """Fixed drafting's steps and, per ``(policy, hint_ngram, cost)``, the steps per width of
    one prompt (``variants``: ``(--policies item, policy, hint_ngram)``)."""
    greedy = SamplingParams(temperature=0.0)
    n, l_len = FLAGS.new_tokens, FLAGS.draft_len
    ngram = NgramDrafter(target.config.vocab_size, draft_len=l_len)
    fixed = generate(target, [ids], DecodeConfig("block", greedy, n), ngram, seed=0)
    out = {"tokens": len(fixed.tokens[0]), "fixed_steps": fixed.metrics.steps, "runs": {}}
    if FLAGS.matches:
        ar = DecodeConfig("autoregressive", greedy, n)
        out["matches"] = match_hits(list(ids), generate(target, [ids], ar).tokens[0])
    for item, policy, hint in variants:
        benchlib.release_programs()
        drafter = dataclasses.replace(ngram, hint_ngram=hint)
        for c in costs:
            cfg = DecodeConfig(
                "block", greedy, n, widths=(0, l_len), width_costs=(1.0, c), width_policy=policy
            )
            m = generate(target, [ids], cfg, drafter, seed=0).metrics
            out["runs"][f"{item} {hint} {c}"] = {str(w): s for w, s in m.width_steps.items()}
    benchlib.release_programs()
    return out


def speed(rec: dict, key: str, c: float, l_len: int) -> float:
    """Tokens per one-token step of the policy's run ``key``, its steps priced at c."""
    steps = rec["runs"][key]
    return rec["tokens"] / (steps.get("0", 0) + c * steps.get(str(l_len), 0))


def render(records: dict, costs: list[float], variants: list[tuple]) -> str:
    """One row per prompt: fixed drafting, then the policy per what-if, per cost."""
    l_len, true = FLAGS.draft_len, FLAGS.true_cost
    names = [f"({r}, {h})" for r, _, h in variants]
    head = ["prompt"] + [f"c = {c}: fixed / " + " / ".join(names) for c in costs]
    rows = []
    for name, rec in records.items():
        cells = [name]
        for c in costs:
            price = c if true is None else true
            fixed = rec["tokens"] / (price * rec["fixed_steps"])
            runs = [speed(rec, f"{r} {h} {c}", price, l_len) for r, _, h in variants]
            cells.append(" / ".join(f"{x:.2f}" for x in [fixed, *runs]))
        rows.append(cells)
    priced = "c one-token steps" if true is None else f"{true} one-token steps (given: c)"
    text = (
        f"{benchlib.command()}\n\nMachine: {benchlib.machine()}\n\n"
        f"Speed over autoregressive decoding implied by the steps per width when a width-{l_len} "
        f"step costs {priced}: fixed drafting, then the policy with "
        f"(--policies item, hint_ngram) = {', '.join(names)}.\n\n"
        + benchlib.table(head, rows, left=1)
    )
    if FLAGS.matches:
        text += "\n\n" + render_matches(records)
    return text


def render_matches(records: dict) -> str:
    """First-token hit rates of prompt lookup by match length, per prompt and overall."""
    lengths = ["1", "2", "3"]
    total = {n: [0, 0] for n in lengths}
    rows = []
    for name, rec in records.items():
        m = rec["matches"]
        for n in lengths:
            total[n] = [total[n][0] + m[n][0], total[n][1] + m[n][1]]
        rows.append([name, m["0"][0]] + [f"{m[n][1]}/{m[n][0]}" for n in lengths])
    rate = lambda n: f"**{total[n][1] / max(total[n][0], 1):.2f}** of {total[n][0]}"
    rows.append(["all", ""] + [rate(n) for n in lengths])
    head = ["prompt", "no match"] + [f"{n}-gram: right / proposals" for n in lengths]
    return (
        "Prompt lookup's first token against the greedy answer, by the length of its match:\n\n"
        + benchlib.table(head, rows, left=1)
    )


def main(argv):
    del argv
    smol = load_pair("smollm2")
    target, tok = smol.target, smol.tokenizer
    costs = [float(c) for c in _COSTS.value]
    hints = [int(h) for h in _HINT.value] or [NgramDrafter(1).hint_ngram]
    variants = [(k, p, h) for (k, p), h in itertools.product(policies().items(), hints)]
    records = {}
    for name, text in prompts().items():
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))
        records[name] = counts(target, ids, costs, variants)
        benchlib.log(f"{name}: {json.dumps(records[name])}")
    report = render(records, costs, variants)
    benchlib.write_report(report, FLAGS.output)
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    app.run(main)
