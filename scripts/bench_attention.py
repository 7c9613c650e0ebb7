r"""Decode speed against the KV cache's capacity: attention over the live window vs the whole cache.

SmolLM2-135M-Instruct, one short chat prompt, greedy. For each capacity S (a run compiled for a
short or a long ``max_new_tokens``) and each step kind (autoregressive; a K = 3, L = 4 tree of
its 8-layer self-draft verified by SpecInfer), the decode program runs the same number of steps
from the same state after prefill, with attention over the live window
(``specjax.models.attention``, the default) and over all S slots (the window set to S: what
specjax computed before). Runs are interleaved; the figures are medians. Also XLA's
``cost_analysis()`` bytes of each compiled decode program.

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
from specjax.decode.seams import decode_program, prefill_program, prepare
from specjax.drafters import ModelDrafter
from specjax.models import attention, load_pair
from specjax.sampling import SamplingParams

_CAPACITIES = flags.DEFINE_string("capacities", "512,8192", "KV-cache capacities S to compare.")
_STEPS = flags.DEFINE_integer("steps", 64, "Decode steps per timed run (each kind).")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved rounds.")
_PROMPT = flags.DEFINE_string(
    "prompt", "Explain in three sentences why the sky is blue.", "The chat prompt."
)
_KINDS = flags.DEFINE_string("kinds", "autoregressive,tree", "Step kinds: autoregressive, tree.")
_OUTPUT = flags.DEFINE_string("output", "", "Write the Markdown report here.")

GREEDY = SamplingParams(temperature=0.0)
KINDS = {"autoregressive": ("autoregressive", 1, 1), "tree K=3 L=4": ("specinfer", 3, 4)}


class Case:
    """One (capacity, kind, attention) cell: the compiled decode program and its input state."""

    def __init__(self, target, draft, prompt, capacity: int, kind: str, windowed: bool):
        verifier, k, l_len = KINDS[kind]
        self.tree = 0 if verifier == "autoregressive" else k * l_len
        config = DecodeConfig(verifier, GREEDY, capacity - 64 - self.tree)
        self.drafter = (
            None
            if verifier == "autoregressive"
            else ModelDrafter(draft, num_paths=k, draft_len=l_len, sampling=GREEDY)
        )
        batch = prepare(target, self.drafter, [prompt], config)
        self.capacity = batch.capacity  # S: the prompt bucket, max_new_tokens and the tree
        attention.MIN_WINDOW = attention.MIN_WINDOW if windowed else batch.capacity
        # New functions for each case: jax caches traces per function, and the two attentions
        # differ only in a module constant read while tracing.
        prefill = jax.jit(
            lambda *a, **kw: prefill_program(*a, **kw), static_argnames=("capacity", "buffer")
        )
        self.state = prefill(
            target,
            self.drafter,
            batch.prompts,
            batch.lengths,
            batch.active,
            0,
            capacity=batch.capacity,
            buffer=batch.buffer,
        )
        run = jax.jit(
            lambda *a, **kw: decode_program(*a, **kw), static_argnames=("config", "max_steps")
        )
        args = (target, self.drafter, self.state)
        compiled = run.lower(*args, max_steps=_STEPS.value, config=config).compile()
        attention.MIN_WINDOW = DEFAULT_WINDOW
        self.bytes = (compiled.cost_analysis() or {}).get("bytes accessed", float("nan"))
        self.call = lambda: compiled(*args)
        state, _ = self.call()
        self.tokens = int(np.asarray(state.lengths - self.state.lengths)[0])
        start, end = int(self.state.lengths[0]), int(state.lengths[0])
        self.out = np.asarray(state.tokens)[0, start:end].tolist()  # the generated tokens

    def seconds(self) -> float:
        return benchlib.timed(lambda: jax.block_until_ready(self.call()))[1]


DEFAULT_WINDOW = attention.MIN_WINDOW


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
    for kind in kinds:
        for capacity in capacities:
            for windowed in (True, False):
                benchlib.log(f"compiling {kind}, S = {capacity}, windowed={windowed}")
                cases[kind, capacity, windowed] = Case(
                    target, draft, prompt, capacity, kind, windowed
                )
    samples = benchlib.interleaved(
        {key: (case.seconds, 1) for key, case in cases.items()}, _ROUNDS.value
    )
    rows = []
    for kind in kinds:
        small = statistics.median(samples[kind, capacities[0], True])
        for capacity in capacities:
            for windowed in (True, False):
                case = cases[kind, capacity, windowed]
                same = case.out == cases[kind, capacities[0], True].out
                secs = statistics.median(samples[kind, capacity, windowed])
                rows.append(
                    [
                        kind,
                        case.capacity,
                        "live window" if windowed else f"all {case.capacity} slots",
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
            f"greedy, {_STEPS.value} decode steps per run from the state after prefill, "
            f"median of {_ROUNDS.value} interleaved rounds.",
            "",
            benchlib.table(
                [
                    "step",
                    "capacity S",
                    "attention over",
                    "tokens",
                    "decode tok/s",
                    f"vs windowed S = {capacities[0]}",
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
