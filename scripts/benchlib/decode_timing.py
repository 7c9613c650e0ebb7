"""``bench_decode.py``'s measurements: repeated generations, and the loop overhead (a whole
generation against its model calls, each jitted and timed alone on the state after prefill)."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import benchlib
from specjax import sampling
from specjax.decode import DecodeConfig, Generation, generate
from specjax.decode.seams import (
    compile_generation,
    last_tokens,
    prefill_program,
    prepare,
    split_keys,
    step,
    tree_inputs,
    verify_tree,
)
from specjax.models.pure import PureModel


class Generator:
    """Repeated :func:`specjax.decode.generate` calls of one configuration.

    The first call compiles (``compile_s``); jax caches the executable, so later calls only run
    it. Each run returns ``metrics.seconds``: the compiled program alone, from the call to the
    final state, as ``generate`` measures it (preparing inputs and reading outputs excluded).
    Compile time and generations are added to ``run``'s counters.
    """

    def __init__(
        self,
        target: PureModel,
        drafter,
        prompts,
        config: DecodeConfig,
        seed: int,
        run: benchlib.Run,
    ):
        self.target, self.config, self.seed, self.counters = target, config, seed, run
        self.drafter = drafter if config.speculative else None
        self.prompts = prompts
        self.last: Generation = generate(target, prompts, config, self.drafter, seed)
        self.compile_s = self.last.compile_seconds
        run.compile_s += self.compile_s
        run.count += 1

    def run(self) -> float:
        self.last = generate(self.target, self.prompts, self.config, self.drafter, self.seed)
        self.counters.count += 1
        return self.last.metrics.seconds

    def hlo_facts(self) -> dict[str, int] | None:
        """Counts in the optimized HLO of the decode program ``generate`` runs (its cached
        executable): ``while`` loops and host-communication ops."""
        _, decode = compile_generation(self.target, self.prompts, self.config, self.drafter)
        text = decode.as_text()
        return {
            "while": text.count(" while("),
            "host": sum(
                text.count(s) for s in ("callback", "infeed(", "outfeed(", " send(", " recv(")
            ),
        }


# Model calls timed alone: each one jitted call of the library's own functions on the state after
# prefill. The target's forwards (benchlib.forward_after) donate the cache and roll it back, so
# every call sees the same committed context.

_prefill = jax.jit(prefill_program, static_argnames=("capacity", "buffer"))
_step = jax.jit(step, static_argnames=("config",))
_tree_inputs = jax.jit(tree_inputs)


@jax.jit
def _propose(drafter, state):
    _, k_draft, _ = split_keys(state.keys, 3)  # the keys speculative_step drafts with
    return drafter.propose(state.draft_state, k_draft, state.tokens, state.lengths)


@functools.partial(jax.jit, static_argnames=("config",))
def _verify(config, state, draft, logits):
    _, _, k_verify = split_keys(state.keys, 3)  # the keys speculative_step verifies with
    return verify_tree(config, k_verify, draft, logits)


@functools.partial(jax.jit, static_argnames=("params",), donate_argnums=(1,))
def _decode(target, cache, lengths, token, noise_keys, params):
    logits, cache = benchlib.forward_after(target, cache, lengths, token)
    return sampling.position_tokens(noise_keys, lengths, logits[:, 0], params), cache


@jax.jit
def _noop(target, drafter, state):
    del target, drafter
    return state.lengths + 1


def model_calls(gen: Generator) -> dict[str, Callable[[], Any]]:
    """The generation's calls, each alone on the state after prefill: ``prefill``; ``propose``,
    ``forward`` (the tree) and ``verify``, or ``decode`` (one token, autoregressive); ``step``;
    and ``dispatch``, one jitted call that takes the same pytrees and does nothing."""
    target, drafter, config = gen.target, gen.drafter, gen.config
    b = prepare(target, drafter, gen.prompts, config)
    args = (b.prompts, b.lengths, b.active, np.int32(gen.seed))

    def prefill():
        return _prefill(target, drafter, *args, capacity=b.capacity, buffer=b.buffer)

    state = jax.block_until_ready(prefill())
    base = state.target_cache.lengths
    holder = {"cache": jax.tree.map(jnp.copy, state.target_cache)}
    calls: dict[str, Callable[[], Any]] = {"prefill": prefill}
    if config.speculative:
        draft, _ = _propose(drafter, state)
        inputs = _tree_inputs(state, draft.tokens)
        logits, holder["cache"] = benchlib.forward_after(target, holder["cache"], base, *inputs)

        def forward():
            out, holder["cache"] = benchlib.forward_after(target, holder["cache"], base, *inputs)
            return out

        calls["propose"] = lambda: _propose(drafter, state)
        calls["forward"] = forward
        calls["verify"] = lambda: _verify(config, state, draft, logits)
    else:
        last = last_tokens(state)

        def decode():
            out, holder["cache"] = _decode(
                target, holder["cache"], base, last, state.noise_keys, config.sampling
            )
            return out

        calls["decode"] = decode
    calls["step"] = lambda: _step(target, drafter, state, config)
    calls["dispatch"] = lambda: _noop(target, drafter, state)
    return calls


def measure_overhead(
    gen: Generator, steps: int, rounds: int, component_repeats: int, run: benchlib.Run
) -> dict:
    """Times one whole generation against its model calls alone (``rounds`` interleaved rounds
    of one generation and ``component_repeats`` calls of each model call); medians, the sums
    over ``steps`` loop iterations and the overheads."""
    calls = model_calls(gen)
    for fn in calls.values():  # compile (first call) and warm up
        run.compile_s += benchlib.wall(fn)()
        fn()
    timed = {name: (benchlib.wall(fn), component_repeats) for name, fn in calls.items()}
    samples = benchlib.interleaved({"generate": (gen.run, 1)} | timed, rounds)
    med = {name: statistics.median(t) for name, t in samples.items()}
    per_step = [n for n in ("propose", "forward", "verify", "decode") if n in med]
    model_sum = med["prefill"] + steps * sum(med[n] for n in per_step)
    step_sum = med["prefill"] + steps * med["step"]
    d = med["dispatch"]
    net = lambda name: max(med[name] - d, 0.0)
    net_sum = net("prefill") + steps * sum(net(n) for n in per_step)
    return {
        **med,
        "steps": steps,
        "model_sum": model_sum,
        "net_sum": net_sum,
        "step_sum": step_sum,
        "overhead": med["generate"] / model_sum - 1,
        "net_overhead": med["generate"] / net_sum - 1,
        "loop_overhead": med["generate"] / step_sum - 1,
    }
