"""``bench_verify.py --parts=greedy``: greedy verification taken apart, to price the draft-law
check that every verifier runs (``common.invalid_laws``, ``common.cut_at``) against the rule."""

from __future__ import annotations

import jax.numpy as jnp

from benchlib import table
from benchlib.verify_inputs import chain_of, read_once, timing_inputs
from benchlib.verify_report import fmt_ms
from specjax.verify import common, greedy


def entrywise_form(draft_probs):
    """The law check as an entrywise test reduced over V: the verdict of ``common.invalid_laws``
    (its form until 2026-11-29; XLA:CPU writes the test out before reducing it)."""
    return ~jnp.all((draft_probs >= 0) & (draft_probs < jnp.inf), axis=-1)


PARTS = {
    "greedy_verify": lambda key, t, q, p: greedy.greedy_verify(key, t, q, p),
    "rule alone (no law check)": lambda key, t, q, p: greedy.greedy_rule(t, None, p),
    "law check alone": lambda key, t, q, p: common.cut_at(common.invalid_laws(q), None),
    "invalid_laws alone (sum and minimum)": lambda key, t, q, p: common.invalid_laws(q),
    "invalid_laws, entrywise form": lambda key, t, q, p: entrywise_form(q),
    "argmax_first (target)": lambda key, t, q, p: common.argmax_first(p),
    "jnp.argmax (target)": lambda key, t, q, p: jnp.argmax(p, axis=-1),
    "read-once (draft + target)": lambda key, t, q, p: read_once(q, p),
}


def run_greedy(timer, key, batches=(1, 8, 64), vocab: int = 128256, length: int = 4) -> str:
    """Times :data:`PARTS` at V = ``vocab``, L = ``length`` for each B, interleaved."""
    calls = {}
    for b in batches:
        draft = chain_of(timing_inputs(key, batch=b, num_paths=1, length=length, vocab=vocab))
        for name, fn in PARTS.items():
            calls[(b, name)] = (fn, (key, *draft))
    times = timer.ms(calls)
    rows = [[name, *(fmt_ms(times[(b, name)]) for b in batches)] for name in PARTS]
    header = ["part", *(f"B = {b} ms" for b in batches)]
    return (
        f"#### Greedy verification taken apart (V = {vocab}, L = {length})\n\n"
        + table(header, rows)
        + "\n\nThe law check reads the draft laws `[B, L, V]` (the rule never does); "
        "the rule reads the target laws `[B, L+1, V]` once for their argmax."
    )
