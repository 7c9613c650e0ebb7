"""``bench_verify.py --parts=share``: each verifier's time as a share of the target's tree
forward on SmolLM2-135M (the practical cost of verification in a decoding step)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import benchlib
from benchlib import table
from benchlib.verify_inputs import CHAIN, MULTIPATH, chain_of, timing_inputs, verifier_call
from benchlib.verify_report import fmt_ms
from specjax import tree
from specjax.models import load_model
from specjax.models.pure import PureModel, prefill

CONTEXT = 128  # committed tokens before the tree
GOAL = 0.10  # every verifier <= 10% of the tree forward at B = 1


def tree_forward_call(model: PureModel, batch: int, num_paths: int, length: int, key):
    """``(fn, args)``: the target's forward over a K x L draft tree after ``CONTEXT`` tokens
    (the cache is not donated: every call sees the same committed context)."""
    vocab = model.config.vocab_size
    k_prompt, k_feed = jax.random.split(key)
    prompts = jax.random.randint(k_prompt, (batch, CONTEXT + 1), 0, vocab)
    lengths = jnp.full((batch,), CONTEXT + 1, jnp.int32)
    capacity = CONTEXT + 1 + num_paths * length + 8
    cache = jax.jit(prefill, static_argnames="capacity")(model, prompts, lengths, capacity)
    t = 1 + num_paths * length
    feed = jax.random.randint(k_feed, (batch, t), 0, vocab)
    positions = CONTEXT + jnp.broadcast_to(
        jnp.asarray(tree.tree_depths(num_paths, length)), feed.shape
    )
    mask = jnp.broadcast_to(jnp.asarray(tree.tree_mask(num_paths, length)), (batch, t, t))
    base = cache.lengths

    def forward(model, cache, feed, positions, mask):
        return benchlib.forward_after(model, cache, base, feed, positions, mask)[0]

    return forward, (model, cache, feed, positions, mask)


def run_share(timer, key, batches=(1, 8), paths=(1, 2, 3, 4), length: int = 4) -> str:
    """Times the SmolLM2 tree forward and the verifiers on inputs of its shape, interleaved."""
    module, _ = load_model("smollm2", "float32")
    model = PureModel.of(module)
    vocab = model.config.vocab_size
    calls: dict = {}
    for b in batches:
        base = timing_inputs(key, batch=b, num_paths=max(paths), length=length, vocab=vocab)
        for k in paths:
            calls[(b, k, "forward")] = tree_forward_call(model, b, k, length, key)
            draft = chain_of(base) if k == 1 else jax.tree.map(lambda x, k=k: x[:, :k], base)
            for name in CHAIN if k == 1 else MULTIPATH:
                calls[(b, k, name)] = (verifier_call(name), (jax.random.key(1), *draft))
    times = timer.ms(calls)
    names = CHAIN + MULTIPATH
    rows, worst = [], {}
    for b in batches:
        for k in paths:
            forward = times[(b, k, "forward")]
            row: list[object] = [b, k, length, fmt_ms(forward)]
            for name in names:
                t = times.get((b, k, name))
                row += ["—"] if t is None else [f"{fmt_ms(t)} ({100 * t / forward:.0f}%)"]
                if t is not None and b == 1:
                    worst[name] = max(worst.get(name, 0.0), t / forward)
            rows.append(row)
    header = ["B", "K", "L", "tree forward ms", *(f"{n} ms (share)" for n in names)]
    met = ", ".join(
        f"{n} {100 * s:.0f}% {'met' if s <= GOAL else 'NOT met'}" for n, s in worst.items()
    )
    return (
        f"#### Verifier time as a share of the SmolLM2-135M tree forward (V = {vocab}, "
        f"{CONTEXT} tokens of context, float32)\n\n"
        + table(header, rows)
        + f"\n\nWorst share at B = 1 (goal ≤ {100 * GOAL:.0f}%): {met}."
    )
