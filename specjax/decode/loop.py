"""Whole generations: :func:`generate` (one compiled ``lax.while_loop`` program) and
:class:`Stream` (the same jitted step called from Python, yielding tokens as they are accepted).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode.config import DecodeConfig
from specjax.decode.metrics import Metrics
from specjax.decode.state import DecodeState
from specjax.decode.step import init_state, step
from specjax.models.pure import PureModel


@dataclasses.dataclass(frozen=True)
class Generation:
    """The result of a generation.

    Attributes:
      tokens: generated ids per row (prompt excluded; a stop token that ended a row is kept).
      metrics: the :class:`Metrics`.
      compile_seconds: time spent compiling (not part of ``metrics.seconds``).
    """

    tokens: list[list[int]]
    metrics: Metrics
    compile_seconds: float = 0.0


def _draft_len(drafter) -> int:
    return 0 if drafter is None else drafter.draft_len


def prepare(target: PureModel, drafter, prompts: Sequence[Sequence[int]], config: DecodeConfig):
    """Checks the inputs and pads them: returns ``(prompts [B, T], lengths [B], capacity,
    buffer)``. Every problem is one ``ValueError`` naming the fix."""
    if config.speculative and drafter is None:
        raise ValueError(f"verifier {config.verifier!r} needs a drafter; pass one")
    if not config.speculative and drafter is not None:
        drafter = None
    if drafter is not None:
        if config.multipath is False and drafter.num_paths > 1:
            raise ValueError(
                f"verifier {config.verifier!r} verifies one chain but the drafter proposes "
                f"{drafter.num_paths} paths; set num_paths=1 or use specinfer, spectr or gbv"
            )
        if drafter.replacement != config.replacement:
            raise ValueError("drafter and verifier disagree on replacement; set both the same")
        draft_vocab = getattr(drafter, "vocab_size", None) or drafter.model.config.vocab_size
        if draft_vocab != target.config.vocab_size:
            raise ValueError(
                f"draft vocab_size {draft_vocab} != target vocab_size "
                f"{target.config.vocab_size}; draft and target must share one tokenizer"
            )
    if len(prompts) == 0:
        raise ValueError("no prompts given")
    vocab = target.config.vocab_size
    lengths = [len(p) for p in prompts]
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty; give at least one token")
        if min(p) < 0 or max(p) >= vocab:
            raise ValueError(f"prompt {i} has token ids outside [0, {vocab}); wrong tokenizer?")
    k_paths = 1 if drafter is None else drafter.num_paths
    longest = max(lengths)
    capacity = longest + config.max_new_tokens + k_paths * _draft_len(drafter) + 2
    limits = [target.config.max_seq_len]
    if drafter is not None and hasattr(drafter, "model"):
        limits.append(drafter.model.config.max_seq_len)
    if capacity > min(limits):
        raise ValueError(
            f"prompt ({longest} tokens) + max_new_tokens ({config.max_new_tokens}) + draft tree "
            f"({capacity - longest - config.max_new_tokens}) = {capacity} positions exceed the "
            f"model's max_seq_len {min(limits)}; shorten the prompt or lower max_new_tokens"
        )
    padded = np.zeros((len(prompts), longest), np.int32)
    for i, p in enumerate(prompts):
        padded[i, : len(p)] = p
    buffer = longest + config.max_new_tokens + _draft_len(drafter) + 1
    return padded, np.asarray(lengths, np.int32), capacity, buffer


@functools.partial(jax.jit, static_argnames=("config", "capacity", "buffer"))
def _generate(target, drafter, prompts, prompt_lengths, key, config, capacity, buffer):
    state = init_state(
        target, drafter, prompts, prompt_lengths, key, capacity=capacity, buffer=buffer
    )
    body = lambda s: step(target, drafter, s, config)
    return jax.lax.while_loop(lambda s: ~jnp.all(s.done), body, state)


def outputs(state: DecodeState) -> list[list[int]]:
    """Generated ids per row (prompt excluded)."""
    tokens = np.asarray(state.tokens)
    start, end = np.asarray(state.prompt_lengths), np.asarray(state.lengths)
    return [tokens[b, start[b] : end[b]].tolist() for b in range(tokens.shape[0])]


def generate(
    target: PureModel,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    drafter=None,
    seed: int = 0,
) -> Generation:
    """Generates for every prompt as ONE compiled program (prefill + ``lax.while_loop``).

    Args:
      target: the target model (:class:`PureModel`).
      prompts: token ids per row (any lengths >= 1).
      config: the :class:`DecodeConfig` (``verifier="autoregressive"`` for the baseline).
      drafter: a drafter (:class:`~specjax.drafters.ModelDrafter`,
        :class:`~specjax.drafters.NgramDrafter`) or None for autoregressive decoding.
      seed: the PRNG seed; row b draws from ``fold_in(key(seed), b)``.

    Returns:
      A :class:`Generation`; ``metrics.seconds`` times the compiled run alone.
    """
    drafter = drafter if config.speculative else None
    padded, lengths, capacity, buffer = prepare(target, drafter, prompts, config)
    args = (target, drafter, jnp.asarray(padded), jnp.asarray(lengths), jax.random.key(seed))
    start = time.perf_counter()
    compiled = _generate.lower(*args, config=config, capacity=capacity, buffer=buffer).compile()
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    state = jax.block_until_ready(compiled(*args))
    seconds = time.perf_counter() - start
    return Generation(outputs(state), Metrics.from_state(state, seconds), compile_seconds)


_init = jax.jit(init_state, static_argnames=("capacity", "buffer"))
_step = jax.jit(step, static_argnames=("config",))


class Stream:
    """Streaming generation: iterate to receive each step's newly accepted ids per row.

    ``for new in Stream(...)`` yields ``list[list[int]]`` (one list per row, possibly empty);
    afterwards :attr:`result` holds the :class:`Generation`. Each step is the same jitted step
    as :func:`generate`'s loop body, with one host read of the lengths per step.
    """

    def __init__(
        self,
        target: PureModel,
        prompts: Sequence[Sequence[int]],
        config: DecodeConfig,
        drafter=None,
        seed: int = 0,
    ):
        self.target, self.config, self.seed = target, config, seed
        self.drafter = drafter if config.speculative else None
        self._prepared = prepare(target, self.drafter, prompts, config)
        self.result: Generation | None = None

    def __iter__(self) -> Iterator[list[list[int]]]:
        padded, lengths, capacity, buffer = self._prepared
        start = time.perf_counter()
        state = _init(
            self.target,
            self.drafter,
            jnp.asarray(padded),
            jnp.asarray(lengths),
            jax.random.key(self.seed),
            capacity=capacity,
            buffer=buffer,
        )
        seen = np.asarray(lengths).copy()
        while True:
            state = _step(self.target, self.drafter, state, self.config)
            now, done = jax.device_get((state.lengths, state.done))
            tokens = np.asarray(state.tokens) if np.any(now > seen) else None
            yield [
                tokens[b, seen[b] : now[b]].tolist() if tokens is not None else []
                for b in range(len(now))
            ]
            seen = now
            if np.all(done):
                break
        seconds = time.perf_counter() - start
        self.result = Generation(outputs(state), Metrics.from_state(state, seconds))
