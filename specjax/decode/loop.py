"""Whole generations: :func:`generate` and :class:`Stream`.

A generation is two compiled programs: *prefill* (prompts -> :class:`DecodeState`) and *decode*
(``step`` under ``lax.while_loop`` for at most ``max_steps`` steps or until every row is done;
the state is donated, so caches are updated in place). :func:`generate` runs decode once for the
first step (timing the first token) and once for the rest; :class:`Stream` runs it one step per
call. Inputs are padded to :class:`~specjax.decode.buckets.ShapeBuckets`, and compiled programs are
kept per shape, so prompts of different lengths reuse the same two programs.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from specjax import sharding
from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.config import DecodeConfig
from specjax.decode.inputs import PreparedBatch, check_seed, prepare
from specjax.decode.metrics import Metrics, Timing
from specjax.decode.state import DecodeState
from specjax.decode.step import init_state, step
from specjax.drafters.feature import FeatureState
from specjax.models.cache import KVCache
from specjax.models.llama import Llama
from specjax.models.pure import PureModel, as_pure

UNLIMITED = np.iinfo(np.int32).max
"""``max_steps`` that runs decode until every row is done."""


@dataclasses.dataclass(frozen=True)
class Generation:
    """The result of a generation.

    Attributes:
      tokens: generated ids per row (prompt excluded; a stop token that ended a row is kept).
      metrics: the :class:`Metrics` (timings excluding compilation, and the compile time).
      programs_compiled: programs this call compiled (0 when every shape was seen before).
      ssd: speculative speculative decoding's counters (:func:`specjax.decode.ssd.ssd_counts`),
        or None for other modes.
    """

    tokens: list[list[int]]
    metrics: Metrics
    programs_compiled: int = 0
    ssd: dict | None = None

    @property
    def compile_seconds(self) -> float:
        """Time spent compiling (not part of ``metrics.seconds``)."""
        return self.metrics.compile_seconds


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
    if isinstance(draft, KVCache):
        draft = cache_layout(draft_tp)
    elif isinstance(draft, FeatureState):  # a replicated head: its cache split over rows only
        draft = FeatureState(cache_layout(False), rows(draft.pending), rows(draft.num_pending))
    else:
        draft = jax.tree.map(rows, draft)
    return state.replace(**fields, target_cache=cache_layout(True), draft_state=draft)


def constrain_state(state: DecodeState, mesh: Mesh | None, draft_tp: bool) -> DecodeState:
    """Keeps the state on its mesh layout inside a compiled program (identity without a mesh)."""
    if mesh is None:
        return state
    return jax.lax.with_sharding_constraint(state, state_shardings(state, mesh, draft_tp))


def _readable_shardings(state: DecodeState, mesh: Mesh, draft_tp: bool) -> DecodeState:
    """Output layout of the programs: caches as inside the loop, everything else replicated
    so that every process can read tokens, lengths and counters."""
    inner = state_shardings(state, mesh, draft_tp)
    replicated = NamedSharding(mesh, PartitionSpec())
    small = {
        f.name: jax.tree.map(lambda _: replicated, getattr(inner, f.name))
        for f in dataclasses.fields(inner)
        if f.name not in ("target_cache", "draft_state")
    }
    draft = inner.draft_state
    if not isinstance(state.draft_state, KVCache):
        draft = jax.tree.map(lambda _: replicated, draft)
    return inner.replace(**small, draft_state=draft)


def prefill_program(target, drafter, prompts, prompt_lengths, active, seed, *, capacity, buffer):
    """Prompts -> the initial :class:`DecodeState` (padding rows start done)."""
    state = init_state(
        target,
        drafter,
        prompts,
        prompt_lengths,
        jax.random.key(seed),
        capacity=capacity,
        buffer=buffer,
    )
    return state.replace(done=~active)


def decode_program(target, drafter, state, max_steps, *, config, mesh=None, draft_tp=False):
    """Runs ``step`` until every row is done or ``max_steps`` steps have run."""
    constrain = lambda s: constrain_state(s, mesh, draft_tp)
    cond = lambda c: (c[0] < max_steps) & ~jnp.all(c[1].done)
    body = lambda c: (c[0] + 1, constrain(step(target, drafter, c[1], config)))
    return jax.lax.while_loop(cond, body, (jnp.int32(0), constrain(state)))[1]


def signature(args) -> tuple:
    """What a compiled program depends on: pytree structure (static fields included), shapes,
    dtypes and layouts of the leaves."""
    leaves, treedef = jax.tree.flatten(args)
    avals = tuple(
        (tuple(x.shape), x.dtype, getattr(x, "weak_type", False), getattr(x, "sharding", None))
        for x in leaves
    )
    return treedef, avals


class ProgramCache:
    """Compiled programs kept by key; the least recently used beyond ``capacity`` are dropped
    (XLA:CPU runs out of code memory after many dozens of programs)."""

    def __init__(self, capacity: int):
        self._kept: collections.OrderedDict = collections.OrderedDict()
        self.capacity = capacity

    def get(self, key, build: Callable[[], Any]) -> tuple[Any, bool]:
        """``(program, built)``: the program kept under ``key``, else ``build()``'s."""
        built = key not in self._kept
        if built:
            self._kept[key] = build()
            while len(self._kept) > self.capacity:
                self._kept.popitem(last=False)
        self._kept.move_to_end(key)
        return self._kept[key], built

    def clear(self) -> None:
        """Drops every kept program."""
        self._kept.clear()


class _Programs:
    """Compiled (prefill, decode) pairs kept per argument signature and static settings."""

    def __init__(self, capacity: int = 24):
        self.kept = ProgramCache(capacity)
        self.compiled = 0  # programs compiled so far in this process

    def get(self, args, sizes: dict, config, mesh, draft_tp: bool):
        """The (prefill, decode) executables for prefill arguments ``args``."""
        key = (signature(args), tuple(sorted(sizes.items())), config, mesh, draft_tp)
        pair, built = self.kept.get(key, lambda: self._compile(args, sizes, config, mesh, draft_tp))
        self.compiled += 2 * built
        return pair

    @staticmethod
    def _compile(args, sizes, config, mesh, draft_tp):
        prefill = functools.partial(prefill_program, **sizes)
        decode = functools.partial(decode_program, config=config, mesh=mesh, draft_tp=draft_tp)
        state = jax.eval_shape(prefill, *args)
        steps = jax.ShapeDtypeStruct((), np.int32)
        if mesh is None:
            prefill_jit, decode_jit = jax.jit(prefill), jax.jit(decode, donate_argnums=(2,))
        else:
            out = _readable_shardings(state, mesh, draft_tp)
            state = jax.tree.map(
                lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), state, out
            )
            replicated = NamedSharding(mesh, PartitionSpec())
            steps = jax.ShapeDtypeStruct((), np.int32, sharding=replicated)
            shardings_of = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
            prefill_jit = jax.jit(prefill, in_shardings=shardings_of(args), out_shardings=out)
            decode_args = (args[0], args[1], state, steps)
            decode_jit = jax.jit(
                decode,
                in_shardings=shardings_of(decode_args),
                out_shardings=out,
                donate_argnums=(2,),
            )
        target, drafter = args[0], args[1]
        return (
            prefill_jit.lower(*args).compile(),
            decode_jit.lower(target, drafter, state, steps).compile(),
        )

    def clear(self) -> None:
        """Drops every kept program."""
        self.kept.clear()


PROGRAMS = _Programs()
"""This process's compiled generation programs (``PROGRAMS.compiled`` counts compilations)."""


def compile_generation(
    target: PureModel | Llama,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    drafter=None,
    mesh: Mesh | None = None,
    buckets: ShapeBuckets = DEFAULT,
):
    """The two compiled programs :func:`generate` would run, ``(prefill, decode)``, for
    inspection: ``.as_text()`` is the optimised HLO, ``.cost_analysis()`` XLA's estimates.
    (Compiled once per shape, like :func:`generate`'s own.)"""
    run = _Run(target, drafter, prompts, config, 0, mesh, buckets)
    return run.prefill, run.decode_executable


def outputs(state: DecodeState, rows: int | None = None) -> list[list[int]]:
    """Generated ids of the first ``rows`` rows (default all; prompt excluded)."""
    tokens = np.asarray(state.tokens)
    start, end = np.asarray(state.prompt_lengths), np.asarray(state.lengths)
    rows = tokens.shape[0] if rows is None else rows
    return [tokens[b, start[b] : end[b]].tolist() for b in range(rows)]


def _counters(state: DecodeState) -> DecodeState:
    """The state without its caches (what metrics and outputs read)."""
    return jax.device_get(state.replace(target_cache=None, draft_state=None))


class _Run:
    """One generation's inputs placed on devices, and its two compiled programs."""

    def __init__(self, target, drafter, prompts, config, seed, mesh, buckets):
        target = as_pure(target)
        self.drafter = drafter if config.speculative else None
        self.target, self.config, self.mesh = target, config, mesh
        before, start = PROGRAMS.compiled, time.perf_counter()
        multiple = 1 if mesh is None else sharding.axis_size(mesh, "data")
        self.batch: PreparedBatch = prepare(
            target, self.drafter, prompts, config, buckets, multiple
        )
        b = self.batch
        check_seed(seed)
        seed = np.asarray(seed, np.int32)
        self.draft_tp = False
        if mesh is None:
            self.args = (target, self.drafter, b.prompts, b.lengths, b.active, seed)
            self.args = jax.tree.map(jnp.asarray, self.args)
            self.put_scalar = jnp.asarray
        else:
            sharding.check_model(target.config, mesh)
            self.draft_tp = self.drafter is not None and self.drafter.tensor_parallel
            place = lambda x: sharding.put(x, sharding.batch_sharding(mesh, x.ndim))
            replicated = NamedSharding(mesh, PartitionSpec())
            self.put_scalar = lambda x: sharding.put(x, replicated)
            self.args = (
                target,
                self.drafter,
                place(b.prompts),
                place(b.lengths),
                place(b.active),
                self.put_scalar(seed),
            )
        sizes = dict(capacity=b.capacity, buffer=b.buffer)
        self.prefill, self.decode_executable = PROGRAMS.get(
            self.args, sizes, config, mesh, self.draft_tp
        )
        self.compile_seconds = time.perf_counter() - start
        self.compiled = PROGRAMS.compiled - before

    def start(self) -> DecodeState:
        """Runs prefill."""
        return self.prefill(*self.args)

    def decode(self, state: DecodeState, max_steps: int) -> DecodeState:
        """At most ``max_steps`` steps on ``state`` (donated: do not use it afterwards)."""
        steps = self.put_scalar(np.int32(max_steps))
        return self.decode_executable(self.target, self.drafter, state, steps)

    def result(self, state: DecodeState, timing: Timing) -> Generation:
        counters = _counters(state)
        metrics = Metrics.from_state(counters, timing)
        return Generation(outputs(counters, self.batch.rows), metrics, self.compiled)


def generate(
    target: PureModel | Llama,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    drafter=None,
    seed: int = 0,
    mesh: Mesh | None = None,
    buckets: ShapeBuckets = DEFAULT,
) -> Generation:
    """Generates for every prompt with two compiled programs (prefill, then decode under
    ``lax.while_loop``), compiled once per shape bucket.

    Args:
      target: the target model (a :class:`~specjax.models.Llama` as loaded, or its
        :class:`PureModel`).
      prompts: token ids per row (any lengths >= 1).
      config: the :class:`DecodeConfig` (``verifier="autoregressive"`` for the baseline).
      drafter: a drafter (:class:`~specjax.drafters.ModelDrafter`,
        :class:`~specjax.drafters.NgramDrafter`) or None for autoregressive decoding.
      seed: the PRNG seed; row b draws from ``fold_in(key(seed), b)``.
      mesh: a device mesh (:func:`specjax.sharding.make_mesh`) or None for one device. With a
        mesh, the models must already be placed on it (:func:`specjax.sharding.shard_module`;
        the target tensor-parallel, the draft tensor-parallel or replicated); prompts are split
        over ``data`` (the batch padded to a multiple of it), KV caches over ``data`` and
        ``model``, and the programs are compiled with explicit in/out shardings. Outputs are
        replicated, so every process can read them.
      buckets: prompt-length and batch sizes that inputs are padded to
        (:data:`~specjax.decode.buckets.EXACT` for none); padding never changes the output.

    Returns:
      A :class:`Generation`. ``metrics.seconds`` times the compiled programs alone (prefill and
      decode), ``metrics.time_to_first_token`` prefill plus the first step, and
      ``metrics.compile_seconds`` the compilation this call needed (0 for a seen shape).
    """
    run = _Run(target, drafter, prompts, config, seed, mesh, buckets)
    start = time.perf_counter()
    state = run.decode(run.start(), 1)
    first_lengths = jax.device_get(state.lengths)  # waits for the first step
    first = time.perf_counter() - start
    state = jax.block_until_ready(run.decode(state, UNLIMITED))
    seconds = time.perf_counter() - start
    first_tokens = int(np.sum((first_lengths - run.batch.lengths)[: run.batch.rows]))
    timing = Timing(seconds, run.compile_seconds, first, first_tokens)
    return run.result(state, timing)


class Stream:
    """Streaming generation: iterate to receive each step's newly accepted ids per row.

    ``for new in Stream(...)`` yields ``list[list[int]]`` (one list per row, possibly empty);
    afterwards :attr:`result` holds the :class:`Generation`. It runs :func:`generate`'s own two
    programs (decode one step per call), with one host read of the lengths per step.
    """

    def __init__(
        self,
        target: PureModel | Llama,
        prompts: Sequence[Sequence[int]],
        config: DecodeConfig,
        drafter=None,
        seed: int = 0,
        buckets: ShapeBuckets = DEFAULT,
    ):
        self._run = _Run(target, drafter, prompts, config, seed, None, buckets)
        self.result: Generation | None = None

    def __iter__(self) -> Iterator[list[list[int]]]:
        run, rows = self._run, self._run.batch.rows
        start = time.perf_counter()
        state = run.start()
        seen = np.asarray(run.batch.lengths).copy()
        first = first_tokens = None
        while True:
            state = run.decode(state, 1)
            now, done = jax.device_get((state.lengths, state.done))
            if first is None:
                first, first_tokens = time.perf_counter() - start, int(np.sum((now - seen)[:rows]))
            tokens = np.asarray(state.tokens) if np.any(now > seen) else None
            yield [
                tokens[b, seen[b] : now[b]].tolist() if tokens is not None else []
                for b in range(rows)
            ]
            seen = now
            if np.all(done):
                break
        seconds = time.perf_counter() - start
        self.result = run.result(state, Timing(seconds, run.compile_seconds, first, first_tokens))
