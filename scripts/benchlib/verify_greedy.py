"""``bench_verify.py --parts=greedy``: greedy verification taken apart, to price the draft-law
check that every verifier runs first (``common.sanitize_draft``) against the rule itself."""

from __future__ import annotations

import jax.numpy as jnp

from benchlib import table
from benchlib.verify_inputs import chain_of, read_once, timing_inputs
from benchlib.verify_report import fmt_ms
from specjax.verify import common, greedy


def min_form(draft_probs):
    """The law check as a float min-reduction: the same verdict as ``common.invalid_laws`` on
    NaN, +-inf, negatives and -0.0 (a candidate form, timed against the boolean reduction)."""
    return jnp.min(jnp.where(draft_probs < jnp.inf, draft_probs, -1.0), axis=-1) < 0


PARTS = {
    "greedy_verify": lambda key, t, q, p: greedy.greedy_verify(key, t, q, p),
    "rule alone (no law check)": lambda key, t, q, p: greedy.greedy_rule(t, None, p),
    "law check alone": lambda key, t, q, p: common.sanitize_draft(q, None)[1],
    "invalid_laws alone": lambda key, t, q, p: common.invalid_laws(q),
    "invalid_laws, min-reduction form": lambda key, t, q, p: min_form(q),
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
