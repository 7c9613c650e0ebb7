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
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from specjax import sharding
from specjax.decode.config import DecodeConfig
from specjax.decode.metrics import Metrics
from specjax.decode.state import DecodeState
from specjax.decode.step import init_state, step
from specjax.models.cache import KVCache
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


def state_shardings(state: DecodeState, mesh: Mesh, draft_tp: bool) -> DecodeState:
    """The mesh layout of a decode state (a DecodeState of NamedShardings): rows over
    ``data``; KV caches also split their KV heads over ``model`` (the draft's only when it is
    tensor-parallel)."""
    rows = lambda x: sharding.batch_sharding(mesh, len(x.shape))
    fields = {
        f.name: jax.tree.map(rows, getattr(state, f.name))
        for f in dataclasses.fields(state)
        if f.name not in ("target_cache", "draft_state")
    }

    def cache_layout(tensor_parallel: bool) -> KVCache:
        kv = NamedSharding(mesh, sharding.cache_spec(tensor_parallel))
        return KVCache(kv, kv, NamedSharding(mesh, PartitionSpec("data")))

    draft = state.draft_state
    draft = cache_layout(draft_tp) if isinstance(draft, KVCache) else jax.tree.map(rows, draft)
    return state.replace(**fields, target_cache=cache_layout(True), draft_state=draft)


def _constrain(state: DecodeState, mesh, draft_tp: bool) -> DecodeState:
    """Keeps the state on its mesh layout inside the compiled loop."""
    return jax.lax.with_sharding_constraint(state, state_shardings(state, mesh, draft_tp))


def _program(
    target, drafter, prompts, prompt_lengths, seed, *, config, capacity, buffer, mesh, draft_tp
):
    """The whole generation: prefill, then ``step`` under ``lax.while_loop`` until all done."""
    state = init_state(
        target,
        drafter,
        prompts,
        prompt_lengths,
        jax.random.key(seed),
        capacity=capacity,
        buffer=buffer,
    )
    constrain = (lambda s: s) if mesh is None else (lambda s: _constrain(s, mesh, draft_tp))
    body = lambda s: constrain(step(target, drafter, s, config))
    state = jax.lax.while_loop(lambda s: ~jnp.all(s.done), body, constrain(state))
    return state.replace(target_cache=None, draft_state=None)  # the caches stay on device


_STATIC = ("config", "capacity", "buffer", "mesh", "draft_tp")
_generate = jax.jit(_program, static_argnames=_STATIC)


def _compile(args, mesh, draft_tp, **static):
    """AOT-compiles the program; with a mesh, under explicit in/out shardings."""
    if mesh is None:
        return _generate.lower(*args, mesh=None, draft_tp=False, **static).compile()
    in_shardings = jax.tree.map(lambda x: x.sharding, args)
    replicated = NamedSharding(mesh, PartitionSpec())
    fn = functools.partial(_program, mesh=mesh, draft_tp=draft_tp, **static)
    jitted = jax.jit(fn, in_shardings=in_shardings, out_shardings=replicated)
    return jitted.lower(*args).compile()


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
    mesh: Mesh | None = None,
) -> Generation:
    """Generates for every prompt as ONE compiled program (prefill + ``lax.while_loop``).

    Args:
      target: the target model (:class:`PureModel`).
      prompts: token ids per row (any lengths >= 1).
      config: the :class:`DecodeConfig` (``verifier="autoregressive"`` for the baseline).
      drafter: a drafter (:class:`~specjax.drafters.ModelDrafter`,
        :class:`~specjax.drafters.NgramDrafter`) or None for autoregressive decoding.
      seed: the PRNG seed; row b draws from ``fold_in(key(seed), b)``.
      mesh: a device mesh (:func:`specjax.sharding.make_mesh`) or None for one device. With a
        mesh, the models must already be placed on it (:func:`specjax.sharding.shard_module`;
        the target tensor-parallel, the draft tensor-parallel or replicated); prompts are split
        over ``data``, KV caches over ``data`` and ``model``, and the program is compiled with
        explicit in/out shardings. Outputs are replicated, so every process can read them.

    Returns:
      A :class:`Generation`; ``metrics.seconds`` times the compiled run alone.
    """
    drafter = drafter if config.speculative else None
    padded, lengths, capacity, buffer = prepare(target, drafter, prompts, config)
    seed = np.asarray(seed, np.int32)
    draft_tp = False
    if mesh is None:
        args = (target, drafter, jnp.asarray(padded), jnp.asarray(lengths), jnp.asarray(seed))
    else:
        sharding.check_batch(len(prompts), mesh)
        sharding.check_model(target.config, mesh)
        draft_tp = _is_tensor_parallel(drafter)
        place = lambda x: sharding.put(x, sharding.batch_sharding(mesh, x.ndim))
        replicated = NamedSharding(mesh, PartitionSpec())
        args = (target, drafter, place(padded), place(lengths), sharding.put(seed, replicated))
    static = dict(config=config, capacity=capacity, buffer=buffer)
    start = time.perf_counter()
    compiled = _compile(args, mesh, draft_tp, **static)
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    state = jax.block_until_ready(compiled(*args))
    seconds = time.perf_counter() - start
    return Generation(outputs(state), Metrics.from_state(state, seconds), compile_seconds)


def _is_tensor_parallel(drafter) -> bool:
    """Whether a model drafter's weights are split over the mesh (else replicated)."""
    model = getattr(drafter, "model", None)
    if model is None:
        return False
    return any(not leaf.sharding.is_fully_replicated for leaf in jax.tree.leaves(model.state))


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
