r"""Decode speed against the KV cache's capacity: attention over the live window vs the whole cache.

SmolLM2-135M-Instruct, one short chat prompt, greedy. For each capacity S (a run compiled for a
short or a long ``max_new_tokens``) and each step kind (autoregressive; a K = 3, L = 4 tree of
its 8-layer self-draft verified by SpecInfer), the decode program runs the same number of steps
from a fresh prefill, as ``generate`` runs it (the state donated), with attention over the live
window (``specjax.models.attention``, the default), in a loop over chunks of the live length with
an online softmax (``attention.CHUNK``, the other design), and over all S slots (the window set
to S: what specjax computed before), and (``rows``) the chunks with the cache written and read
row by row (``specjax.models.cache.UNROLL_ROWS``). Runs are interleaved; the figures are
medians. Also XLA's ``cost_analysis()`` bytes of each compiled decode program.

    python scripts/bench_attention.py --capacities=512,8192 --rounds=3 \
        --output=benchmarks/bench_attention_cpu.md
"""

from __future__ import annotations

import statistics

import benchlib
import jax
import numpy as np
from absl import app, flags

from specjax.decode import DecodeConfig
from specjax.decode.seams import PROGRAMS, Run, prepare
from specjax.drafters import ModelDrafter
from specjax.models import attention, attention_windows, cache, load_pair
from specjax.sampling import SamplingParams

_CAPACITIES = flags.DEFINE_string("capacities", "512,8192", "KV-cache capacities S to compare.")
_STEPS = flags.DEFINE_integer("steps", 128, "Decode steps per timed run (each kind).")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved rounds.")
_PROMPT = flags.DEFINE_string(
    "prompt", "Explain in three sentences why the sky is blue.", "The chat prompt."
)
_KINDS = flags.DEFINE_string("kinds", "autoregressive,tree", "Step kinds: autoregressive, tree.")
_METHODS = flags.DEFINE_string(
    "methods",
    "window,chunks,dense",
    "Attentions: window (the default: a static window chosen on device), chunks (a loop over "
    "--chunk-slot chunks with an online softmax), dense (all S slots), rows (chunks, and the "
    "cache written and read row by row: specjax.models.cache.UNROLL_ROWS).",
)
_CHUNK = flags.DEFINE_integer("chunk", 256, "Slots per chunk for --methods=chunks.")
_OUTPUT = flags.DEFINE_string("output", "", "Write the Markdown report here.")

GREEDY = SamplingParams(temperature=0.0)
KINDS = {"autoregressive": ("autoregressive", 1, 1), "tree K=3 L=4": ("specinfer", 3, 4)}


class Case:
    """One (capacity, kind, attention) cell: the generation's compiled programs, as users run
    them (:class:`~specjax.decode.seams.Run`: the decode program donates its state, so the
    caches are updated in place), and the tokens of one timed call."""

    def __init__(self, target, draft, prompt, capacity: int, kind: str, method: str):
        verifier, k, l_len = KINDS[kind]
        self.tree = 0 if verifier == "autoregressive" else k * l_len
        config = DecodeConfig(verifier, GREEDY, capacity - 64 - self.tree)
        drafter = (
            None
            if verifier == "autoregressive"
            else ModelDrafter(draft, num_paths=k, draft_len=l_len, sampling=GREEDY)
        )
        batch = prepare(target, drafter, [prompt], config)
        self.capacity = batch.capacity  # S: the prompt bucket, max_new_tokens and the tree
        # The program cache keys on shapes, not on this module constant read while tracing:
        # each case compiles its own (a Run keeps its executables after the cache is cleared).
        PROGRAMS.clear()
        attention_windows.MIN_WINDOW = batch.capacity if method == "dense" else DEFAULT_WINDOW
        attention.CHUNK = _CHUNK.value if method in ("chunks", "rows") else 0
        cache.UNROLL_ROWS = len(batch.prompts) if method == "rows" else 0
        try:
            self.run = Run(target, drafter, batch, config, 0, None)
        finally:
            attention_windows.MIN_WINDOW, attention.CHUNK, cache.UNROLL_ROWS = DEFAULT_WINDOW, 0, 0
        PROGRAMS.clear()
        executable = self.run.programs.decode
        self.bytes = (executable.cost_analysis() or {}).get("bytes accessed", float("nan"))
        start = self.run.start()
        begin = int(start.lengths[0])
        state = self.run.decode(start, _STEPS.value)
        self.tokens = int(state.lengths[0]) - begin
        self.out = np.asarray(state.tokens)[0, begin : begin + self.tokens].tolist()

    def seconds(self) -> float:
        """Seconds of one decode call of ``--steps`` steps from a fresh prefill (untimed)."""
        state = jax.block_until_ready(self.run.start())
        return benchlib.timed(lambda: jax.block_until_ready(self.run.decode(state, _STEPS.value)))[
            1
        ]


DEFAULT_WINDOW = attention_windows.MIN_WINDOW


def main(argv):
    del argv
    shipped = load_pair("smollm2_self", dtype="float32", draft_layers=8)
    target, draft, tokenizer = shipped.target, shipped.draft, shipped.tokenizer
    prompt = tokenizer.encode(
        tokenizer.apply_chat_template([{"role": "user", "content": _PROMPT.value}])
    )
    capacities = [int(c) for c in _CAPACITIES.value.split(",")]
    cases = {}
    kinds = [k for k in KINDS if k.split()[0] in _KINDS.value.split(",")]
    methods = _METHODS.value.split(",")
    for kind in kinds:
        for capacity in capacities:
            for method in methods:
                benchlib.log(f"compiling {kind}, S = {capacity}, {method}")
                cases[kind, capacity, method] = Case(target, draft, prompt, capacity, kind, method)
    samples = benchlib.interleaved(
        {key: (case.seconds, 1) for key, case in cases.items()}, _ROUNDS.value
    )
    rows = []
    for kind in kinds:
        small = statistics.median(samples[kind, capacities[0], methods[0]])
        for capacity in capacities:
            for method in methods:
                case = cases[kind, capacity, method]
                same = case.out == cases[kind, capacities[0], methods[0]].out
                secs = statistics.median(samples[kind, capacity, method])
                over = {
                    "window": "live window",
                    "chunks": f"chunks of {_CHUNK.value}",
                    "dense": f"all {case.capacity} slots",
                    "rows": f"chunks of {_CHUNK.value}, row writes",
                }[method]
                rows.append(
                    [
                        kind,
                        case.capacity,
                        over,
                        case.tokens,
                        f"{case.tokens / secs:.1f}",
                        f"{small / secs:.2f}",
                        f"{case.bytes / 1e9:.2f}",
                        "yes" if same else "NO",
                    ]
                )
    text = "\n".join(
        [
            "# Decode speed against the cache's capacity",
            "",
            f"`{benchlib.command()}`",
            "",
            f"{benchlib.machine()}; SmolLM2-135M-Instruct fp32, one prompt ({len(prompt)} tokens), "
            f"greedy, {_STEPS.value} decode steps per run from the state after prefill (the "
            "decode program as generate runs it: state donated, caches updated in place), "
            f"median of {_ROUNDS.value} interleaved rounds.",
            "",
            benchlib.table(
                [
                    "step",
                    "capacity S",
                    "attention over",
                    "tokens",
                    "decode tok/s",
                    f"vs {methods[0]} at S = {capacities[0]}",
                    "XLA bytes (GB)",
                    "same tokens",
                ],
                rows,
                left=3,
            ),
            "",
            "XLA's bytes count every branch of the window switch, so they are an upper bound for",
            "the windowed programs; the time is what one step costs.",
            "",
        ]
    )
    benchlib.write_report(text, _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
