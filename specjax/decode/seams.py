"""The decode loop's low-level seams, for benchmarks, tests, research and other loops.

The user API is :mod:`specjax.decode` (``generate``, ``Stream``, ``ContinuousBatch``, ...);
these are the pieces it is built from, stable enough to build on:

* inputs: ``prepare`` (checks and pads prompts), ``PreparedBatch``;
* programs: ``prefill_program`` / ``decode_program`` (uncompiled), ``compile_generation`` (the
  compiled pair, for HLO inspection), ``Programs`` (the frozen pair and its key), ``Run`` (the
  driver: one generation's placed inputs and its ``Programs``, decoded as ``generate``,
  ``Stream`` and ``ContinuousBatch`` decode them), ``PROGRAMS`` (the program cache),
  ``state_shardings`` / ``constrain_state`` (the decode state's mesh layout);
* one step: ``step`` (the adaptive-width step), ``speculative_step`` / ``autoregressive_step``,
  ``init_state``, ``split_keys``, ``last_tokens``, ``verify_and_commit`` (the target's half),
  ``tree_inputs`` / ``verify_tree`` (the target's tree forward and its verification),
  ``score_tree`` / ``commit_tree`` (``verify_and_commit``'s two halves: the one tree forward,
  then verify and commit from its logits), ``tree_laws`` (the target's laws along each path),
  ``DecodeState`` and ``StepStats`` (the counters), ``outputs`` (a state's tokens per row);
* observing a step: ``observed_step`` (``speculative_step`` that also returns the step's drafts,
  draft laws and target laws from its one target forward, a ``StepLaws``);
* SSD: ``generate_ssd`` (its loop, also reached through ``generate``), ``verify_round`` (the
  target half of a round), ``ssd_counts``.
"""

from specjax.decode.inputs import PreparedBatch, prepare
from specjax.decode.loop import Run, compile_generation, outputs
from specjax.decode.observe import StepLaws, observed_step
from specjax.decode.programs import (
    PROGRAMS,
    Programs,
    constrain_state,
    decode_program,
    prefill_program,
    state_shardings,
    step,
)
from specjax.decode.ssd.rounds import generate_ssd, ssd_counts, verify_round
from specjax.decode.state import DecodeState, StepStats
from specjax.decode.step import (
    TargetOut,
    autoregressive_step,
    commit_tree,
    init_state,
    last_tokens,
    score_tree,
    speculative_step,
    split_keys,
    target_forward,
    tree_inputs,
    tree_laws,
    verify_and_commit,
    verify_tree,
)

__all__ = [
    "PROGRAMS",
    "DecodeState",
    "PreparedBatch",
    "Programs",
    "Run",
    "StepLaws",
    "StepStats",
    "TargetOut",
    "autoregressive_step",
    "commit_tree",
    "compile_generation",
    "constrain_state",
    "decode_program",
    "generate_ssd",
    "init_state",
    "last_tokens",
    "observed_step",
    "outputs",
    "prefill_program",
    "prepare",
    "score_tree",
    "speculative_step",
    "split_keys",
    "ssd_counts",
    "state_shardings",
    "step",
    "target_forward",
    "tree_inputs",
    "tree_laws",
    "verify_and_commit",
    "verify_round",
    "verify_tree",
]
