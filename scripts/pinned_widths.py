r"""The widths the controller takes when the width costs are pinned, prompt by prompt, and the
speed they imply (no clock): SmolLM2 with the n-gram drafter at temperature 0 on the prompts of
scripts/bench_widths.py.

A generation's steps per width at costs ``(1, c)`` (``DecodeConfig.width_costs``) give the speed
the controller reaches where a width-L step costs c one-token steps: ``n / (n_0 + c n_L)`` for
its n tokens, n_0 one-token and n_L drafting steps, against ``n / (c · steps)`` for fixed
drafting and 1 for autoregressive decoding. Greedy and timed by no clock, so it separates what
the controller chooses from timing noise; a calibration that misreads the cost (on the 2-core
CPU a width-6 step costs ~1.6 one-token steps, and single calibrations read up to 2.2 and more)
is one of the columns. ``--reveal`` runs what-if values of ``probes.REVEAL`` side by side (the
first-token estimate from which an n-gram row probes; above 1: never). The flags of
scripts/bench_widths.py choose the prompts and lengths and name the outputs (``--mtbench``,
``--only``, ``--new_tokens``, ``--draft_len``, ``--output``, ``--json``).

  python scripts/pinned_widths.py --costs=1.6,2.0,2.4,2.8 --reveal=2,0.8 --output=/tmp/pinned.md
"""

from __future__ import annotations

import json

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
from absl import app, flags
from bench_widths import prompts  # its flags serve here too: --mtbench, --only, --output, ...

from specjax.decode import DecodeConfig, generate, probes
from specjax.decode.seams import PROGRAMS
from specjax.drafters import NgramDrafter
from specjax.models import load_pair
from specjax.sampling import SamplingParams

_COSTS = flags.DEFINE_list("costs", ["1.6", "2.0", "2.4", "2.8"], "pinned costs of a width-L step")
_REVEAL = flags.DEFINE_list("reveal", [], "what-if values of probes.REVEAL (default: as shipped)")
FLAGS = flags.FLAGS


def counts(target, ids: list[int], costs: list[float], reveals: list[float]) -> dict:
    """Fixed drafting's steps and, per ``(reveal, cost)``, the steps per width of one prompt."""
    greedy = SamplingParams(temperature=0.0)
    n, l_len = FLAGS.new_tokens, FLAGS.draft_len
    ngram = NgramDrafter(target.config.vocab_size, draft_len=l_len)
    fixed = generate(target, [ids], DecodeConfig("block", greedy, n), ngram, seed=0)
    out = {"tokens": len(fixed.tokens[0]), "fixed_steps": fixed.metrics.steps, "runs": {}}
    shipped = probes.REVEAL
    try:
        for reveal in reveals:
            probes.REVEAL = reveal
            PROGRAMS.clear()  # REVEAL is read when the decode program is traced
            for c in costs:
                cfg = DecodeConfig("block", greedy, n, widths=(0, l_len), width_costs=(1.0, c))
                m = generate(target, [ids], cfg, ngram, seed=0).metrics
                out["runs"][f"{reveal} {c}"] = {str(w): s for w, s in m.width_steps.items()}
    finally:
        probes.REVEAL = shipped
        PROGRAMS.clear()
    return out


def speed(rec: dict, reveal: float, c: float, l_len: int) -> float:
    """Tokens per one-token step of the controller's run at ``(reveal, c)``."""
    steps = rec["runs"][f"{reveal} {c}"]
    return rec["tokens"] / (steps.get("0", 0) + c * steps.get(str(l_len), 0))


def render(records: dict, costs: list[float], reveals: list[float]) -> str:
    """One row per prompt: fixed drafting, then the controller per REVEAL value, per cost."""
    l_len = FLAGS.draft_len
    head = ["prompt"] + [f"c = {c}: fixed / " + " / ".join(f"{r}" for r in reveals) for c in costs]
    rows = []
    for name, rec in records.items():
        cells = [name]
        for c in costs:
            fixed = rec["tokens"] / (c * rec["fixed_steps"])
            cells.append(
                " / ".join(f"{x:.2f}" for x in [fixed] + [speed(rec, r, c, l_len) for r in reveals])
            )
        rows.append(cells)
    return (
        f"{benchlib.command()}\n\nMachine: {benchlib.machine()}\n\n"
        f"Speed over autoregressive decoding implied by the steps per width when a width-{l_len} "
        f"step costs c one-token steps: fixed drafting, then the controller with "
        f"REVEAL = {', '.join(map(str, reveals))}.\n\n" + benchlib.table(head, rows, left=1)
    )


def main(argv):
    del argv
    smol = load_pair("smollm2")
    target, tok = smol.target, smol.tokenizer
    costs = [float(c) for c in _COSTS.value]
    reveals = [float(r) for r in _REVEAL.value] or [probes.REVEAL]
    records = {}
    for name, text in prompts().items():
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))
        records[name] = counts(target, ids, costs, reveals)
        benchlib.log(f"{name}: {json.dumps(records[name])}")
    report = render(records, costs, reveals)
    print(report)
    benchlib.write_report(report, FLAGS.output)
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    app.run(main)
