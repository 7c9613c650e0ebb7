"""specjax.decode: the speculative decoding loop (``python -m specjax.decode --config ...``).

``generate`` runs a whole generation as two compiled programs (prefill, then a
``lax.while_loop`` of steps), compiled once per shape bucket; ``Stream`` yields tokens as they are
accepted; ``ContinuousBatch`` runs many requests through a fixed number of slots, refilling
finished rows and yielding each ``Completion`` as it finishes (batch jobs);
``verifier="autoregressive"`` is the baseline on the same code path.

Seams for benchmarks, tests and other loops: ``prepare`` (checks and pads inputs),
``prefill_program`` / ``decode_program`` (the two programs, uncompiled), ``compile_generation``
(the compiled programs, for HLO inspection), ``state_shardings`` / ``constrain_state`` (the
decode state's mesh layout), ``step`` / ``verify_and_commit`` (one step, the target's half),
``tree_inputs`` / ``verify_tree`` (the target's tree forward and its verification),
``StepStats`` (the counters), ``generate_ssd`` / ``verify_round`` (speculative speculative
decoding and its target half).
"""

# ruff: noqa: E402 (the early handlers go in before the imports below load JAX)
from specjax.cli import interrupts

interrupts.install_early("specjax.decode")  # only when this process is the CLI


from specjax.decode import compile_cache
from specjax.decode.adaptive import step
from specjax.decode.batching import Completion, ContinuousBatch, Request
from specjax.decode.buckets import EXACT, ShapeBuckets
from specjax.decode.config import AUTOREGRESSIVE, DecodeConfig
from specjax.decode.inputs import PreparedBatch, prepare
from specjax.decode.loop import Generation, Stream, compile_generation, generate, outputs
from specjax.decode.metrics import Metrics, Timing
from specjax.decode.programs import (
    PROGRAMS,
    constrain_state,
    decode_program,
    prefill_program,
    state_shardings,
)
from specjax.decode.ssd import generate_ssd, ssd_counts, ssd_rates, ssd_table, verify_round
from specjax.decode.state import DecodeState, StepStats
from specjax.decode.step import (
    autoregressive_step,
    init_state,
    last_tokens,
    speculative_step,
    split_keys,
    tree_inputs,
    verify_and_commit,
    verify_tree,
)

__all__ = [
    "AUTOREGRESSIVE",
    "EXACT",
    "PROGRAMS",
    "Completion",
    "ContinuousBatch",
    "DecodeConfig",
    "DecodeState",
    "Generation",
    "Metrics",
    "PreparedBatch",
    "Request",
    "ShapeBuckets",
    "StepStats",
    "Stream",
    "Timing",
    "autoregressive_step",
    "compile_cache",
    "compile_generation",
    "constrain_state",
    "decode_program",
    "generate",
    "generate_ssd",
    "init_state",
    "last_tokens",
    "outputs",
    "prefill_program",
    "prepare",
    "speculative_step",
    "split_keys",
    "ssd_counts",
    "ssd_rates",
    "ssd_table",
    "state_shardings",
    "step",
    "tree_inputs",
    "verify_and_commit",
    "verify_round",
    "verify_tree",
]
