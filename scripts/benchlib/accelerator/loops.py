"""A decode step timed as N steps inside one compiled program, beside one step per host call.

* :class:`DecodeLoop`: specjax's own decode program (``decode_program``: ``lax.while_loop``
  over autoregressive steps, greedy, no stop token) after a prefilled context, compiled once
  per set of XLA ``compiler_options`` from one lowering, run for N steps per call: the
  per-step time a generation sees, without the host's per-call cost.
* :func:`forward_loop_ms`: the model's one-token forward alone in a ``fori_loop`` (cache
  carried, argmax fed back): the step without the decode program's bookkeeping.
* :func:`per_call_ms`: one forward per host call (what ``bench_accelerator`` timed before).
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import benchlib
from benchlib.accelerator.shared import median_ms
from benchlib.accelerator.sizes import Sizes
from specjax.decode import DecodeConfig
from specjax.decode.seams import decode_program, prefill_program
from specjax.models.pure import PureModel
from specjax.sampling import SamplingParams


class DecodeLoop:
    """The decode program of ``model`` at ``batch`` rows after ``sizes.context`` committed
    tokens (KV capacity ``sizes.capacity``), lowered once; :meth:`compile` per option set.
    The prefill program compiles at the first :meth:`state` (counting operations needs none);
    ``prefill_from``: another loop whose prefilled states this one takes where they have the
    same structure (a variant of the same model: one prefill compile fewer)."""

    def __init__(
        self,
        model: PureModel,
        batch: int,
        sizes: Sizes,
        steps: int,
        prefill_from: DecodeLoop | None = None,
    ):
        cfg = model.config
        self.model, self.sizes, self.steps = model, sizes, steps
        ctx, cap = sizes.context, sizes.capacity
        if ctx + 1 + steps > cap:
            raise ValueError(f"context {ctx} + {steps} steps do not fit a capacity of {cap}")
        # The prompt is the context and one token more: prefill commits ctx tokens, and the
        # first step feeds the last. No stop token; no row reaches its limit within ``steps``.
        config = DecodeConfig("autoregressive", SamplingParams(temperature=0.0), cap)
        rng = np.random.default_rng(0)
        self.prefill_args = (
            model,
            None,
            jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, ctx + 1)), jnp.int32),
            jnp.full((batch,), ctx + 1, jnp.int32),
            jnp.ones((batch,), bool),
            np.int32(0),
        )
        self.prefill_jit = jax.jit(
            functools.partial(prefill_program, capacity=cap, buffer=cap, widths=(), rows=None)
        )
        self.prefill = None
        state = jax.eval_shape(self.prefill_jit, *self.prefill_args)
        self.source = None
        if prefill_from is not None and _same_layout(state, prefill_from.abstract_state):
            self.source = prefill_from
        self.abstract_state = state
        self.n = jax.device_put(np.int32(steps))
        self.rows = jax.device_put(np.int32(batch))
        decode = jax.jit(functools.partial(decode_program, config=config), donate_argnums=(2,))
        self.lowered = decode.lower(model, None, state, self.n, self.rows, None)

    def state(self):
        """A fresh state after the prefilled context (its caches are donated to a step)."""
        if self.source is not None:
            return self.source.state()
        if self.prefill is None:
            self.prefill = self.prefill_jit.lower(*self.prefill_args).compile()
        return self.prefill(*self.prefill_args)

    def compile(self, options: dict | None = None):
        """The decode program compiled with XLA ``compiler_options`` (None: the defaults)."""
        return self.lowered.compile(compiler_options=options or None)

    def ms_per_step(self, compiled) -> dict[str, Any]:
        """``compiled`` run for ``steps`` steps from a fresh state, ``sizes.loop_warmup``
        times untimed then ``sizes.loop_repeats`` timed: the median milliseconds per step,
        and the spread (min, max) of the timed calls."""
        times = []
        for i in range(self.sizes.loop_warmup + self.sizes.loop_repeats):
            state = jax.block_until_ready(self.state())
            start = time.perf_counter()
            state, ran = compiled(self.model, None, state, self.n, self.rows, None)
            jax.block_until_ready(state.lengths)
            seconds = time.perf_counter() - start
            if int(ran) != self.steps:
                raise RuntimeError(f"the decode program ran {int(ran)} steps, not {self.steps}")
            if i >= self.sizes.loop_warmup:
                times.append(1e3 * seconds / self.steps)
        return dict(ms=statistics.median(times), ms_min=min(times), ms_max=max(times))

    def per_call_ms(self) -> float:
        """:func:`per_call_ms` on this loop's prefilled cache."""
        return per_call_ms(self.model, self.state().target_cache, self.sizes)

    def forward_loop_ms(self) -> float:
        """:func:`forward_loop_ms` on this loop's prefilled cache."""
        return forward_loop_ms(self.model, self.state, self.steps, self.sizes)


def _same_layout(a, b) -> bool:
    """Whether two abstract pytrees have one structure, shapes and dtypes."""
    leaves = lambda t: [(x.shape, x.dtype) for x in jax.tree.leaves(t)]
    return jax.tree.structure(a) == jax.tree.structure(b) and leaves(a) == leaves(b)


def per_call_ms(model: PureModel, cache, sizes: Sizes) -> float:
    """Median milliseconds of one one-token forward per host call after the context in
    ``cache`` (rolled back to it every call; the cache is donated)."""
    b, ctx = cache.batch, sizes.context
    at_ctx = jnp.full((b,), ctx, jnp.int32)
    token = jnp.zeros((b, 1), jnp.int32)
    box = [cache]

    def step():
        logits, box[0] = benchlib.forward_after(model, box[0], at_ctx, token, last_only=True)
        return logits, box[0]

    return median_ms(step, sizes)[0]


@functools.partial(jax.jit, static_argnames=("steps",), donate_argnums=(1,))
def _forward_loop(model, cache, token, *, steps):
    def body(_, carry):
        cache, token = carry
        logits, cache, _ = model(token, cache=cache, logits_to_keep=1)
        return cache, jnp.argmax(logits[:, -1], -1).astype(jnp.int32)[:, None]

    return jax.lax.fori_loop(0, steps, body, (cache, token))


def forward_loop_ms(model: PureModel, fresh_state, steps: int, sizes: Sizes) -> float:
    """Median milliseconds per step of ``steps`` one-token forwards (argmax fed back) in one
    ``fori_loop`` program, each run from ``fresh_state()``'s prefilled cache."""
    times = []
    for i in range(sizes.loop_warmup + sizes.loop_repeats):
        state = fresh_state()
        cache, token = state.target_cache, state.tokens[:, :1]
        jax.block_until_ready(cache)
        start = time.perf_counter()
        jax.block_until_ready(_forward_loop(model, cache, token, steps=steps))
        if i >= sizes.loop_warmup:
            times.append(1e3 * (time.perf_counter() - start) / steps)
    return statistics.median(times)
