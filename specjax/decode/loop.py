"""Whole generations on one device or a mesh: :func:`generate_local` and its :class:`Run`.

A generation is two compiled programs: *prefill* (prompts -> :class:`DecodeState`) and *decode*
(``step`` under ``lax.while_loop`` for at most ``max_steps`` steps or until every row is done;
the state is donated, so caches are updated in place). :func:`generate_local` runs decode once
for the first step (timing the first token) and once for the rest;
:class:`~specjax.decode.stream.Stream` runs it one step per call, and
:class:`~specjax.decode.batching.ContinuousBatch` in chunks, all through :meth:`Run.decode`.
Inputs are padded to :class:`~specjax.decode.buckets.ShapeBuckets`, and compiled programs are
kept per shape, so prompts of different lengths reuse the same two programs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from specjax import sharding
from specjax.decode import costs as cost_source
from specjax.decode import widths
from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.config import DecodeConfig
from specjax.decode.inputs import (
    PreparedBatch,
    check_config,
    check_seed,
    couple,
    on_device,
    prepare,
)
from specjax.decode.metrics import Metrics, Timing
from specjax.decode.programs import PROGRAMS
from specjax.decode.state import DecodeState, check_target
from specjax.models.decoder import Decoder
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


def compile_generation(
    target: PureModel | Decoder,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    drafter=None,
    mesh: Mesh | None = None,
    buckets: ShapeBuckets = DEFAULT,
):
    """The two compiled programs :func:`generate` would run, ``(prefill, decode)``, for
    inspection: ``.as_text()`` is the optimised HLO, ``.cost_analysis()`` XLA's estimates.
    (Compiled once per shape, like :func:`generate`'s own.)"""
    run = Run.of(target, drafter, prompts, config, 0, mesh, buckets)
    return run.programs.prefill, run.programs.decode


def outputs(state: DecodeState, rows: int | None = None) -> list[list[int]]:
    """Generated ids of the first ``rows`` rows (default all; prompt excluded)."""
    tokens = np.asarray(state.tokens)
    start, end = np.asarray(state.prompt_lengths), np.asarray(state.lengths)
    rows = tokens.shape[0] if rows is None else rows
    return [tokens[b, start[b] : end[b]].tolist() for b in range(rows)]


def _counters(state: DecodeState) -> DecodeState:
    """The state without its caches (what metrics and outputs read)."""
    return jax.device_get(state.replace(target_cache=None, draft_state=None))


class Run:
    """The driver of one generation: its inputs placed on devices, its frozen
    :class:`~specjax.decode.programs.Programs`, and :meth:`decode`, which :func:`generate_local`,
    :class:`~specjax.decode.stream.Stream` and :class:`~specjax.decode.batching.Slots` all call
    (it keeps only device scalars and the steps run for the caller to take)."""

    @classmethod
    def of(cls, target, drafter, prompts, config, seed, mesh, buckets) -> Run:
        """The run of ``prompts`` (checked and padded by :func:`prepare`)."""
        check_config(config)
        target = as_pure(target)
        drafter = couple(drafter, config) if config.speculative else None
        multiple = 1 if mesh is None else sharding.axis_size(mesh, "data")
        batch = prepare(target, drafter, prompts, config, buckets, multiple)
        return cls(target, drafter, batch, config, seed, mesh)

    def __init__(self, target, drafter, batch: PreparedBatch, config, seed, mesh):
        target = as_pure(target)
        self.drafter = drafter if config.speculative else None
        self.target, self.config, self.mesh = target, config, mesh
        before, start = PROGRAMS.compiled, time.perf_counter()
        self.batch = b = batch
        check_seed(seed)
        seed = np.asarray(seed, np.int32)
        self.draft_tp = False
        if mesh is None:
            inputs = (b.prompts, b.lengths, b.active, seed)
            self.args = on_device((target, self.drafter), inputs)
            self.put_scalar = jax.device_put
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
        self.programs = PROGRAMS.get(self.args, sizes, config, mesh, self.draft_tp)
        self.compile_seconds = time.perf_counter() - start
        self.compiled = PROGRAMS.compiled - before
        self.seed = int(seed)
        self._steps: list = []  # steps run by each decode call not yet taken
        self._scalars, self._inputs = {}, {}
        self.calibration_seconds = 0.0  # spent by prepare() measuring the width costs

    def start(self) -> DecodeState:
        """Runs prefill."""
        return self.programs.prefill(*self.args)

    @property
    def costs(self) -> np.ndarray:
        """float32 ``[Y]`` the width costs the policy weighs (:mod:`specjax.decode.costs`): given,
        measured on this program (:meth:`prepare`), or guessed where no clock may choose."""
        if self.config.width_costs:
            return np.asarray(self.config.width_costs, np.float32)
        measured = PROGRAMS.costs.get(self.programs.key)
        if measured is not None and cost_source.may_measure(self.config):
            return measured
        return widths.guess_costs(self.config.widths, self.drafter.num_paths)

    @property
    def measured(self) -> bool:
        """Whether the costs are settled: not to be measured, or measured."""
        return not cost_source.may_measure(self.config) or self.programs.key in PROGRAMS.costs

    def decode(
        self,
        state: DecodeState,
        max_steps: int,
        force: int = widths.AUTO,
        until_done: int | None = None,
    ) -> DecodeState:
        """At most ``max_steps`` steps on ``state`` (donated: do not use it afterwards), ending
        early once ``until_done`` rows are done (default: all); ``force``: a width index every
        step takes (:data:`~specjax.decode.widths.AUTO`: the policy chooses)."""
        steps = self._scalar(max_steps)
        until = self._scalar(state.batch if until_done is None else until_done)
        inputs = self._width_inputs(force) if self.config.widths else None
        state, steps_run = self.programs.decode(
            self.target, self.drafter, state, steps, until, inputs
        )
        self._steps.append(steps_run)  # device scalars, read by take_steps
        return state

    def _width_inputs(self, force: int) -> widths.WidthInputs:
        """The policy's inputs on device, kept per (costs, force), and per force alone once the
        costs are settled (:attr:`measured`): a streamed sub-millisecond step should pay neither
        host-to-device copies nor reading the costs again."""
        if ("settled", force) in self._inputs:
            return self._inputs["settled", force]
        costs = self.costs
        key = (costs.tobytes(), force)
        if key not in self._inputs:
            host = widths.WidthInputs(costs, np.int32(force))
            self._inputs[key] = jax.tree.map(self.put_scalar, host)
        if self.measured:
            self._inputs["settled", force] = self._inputs[key]
        return self._inputs[key]

    def _scalar(self, value: int):
        """``value`` as an int32 device scalar (kept: a step of a few hundred microseconds
        should not pay a host-to-device copy for its loop bounds)."""
        if value not in self._scalars:
            self._scalars[value] = self.put_scalar(np.int32(value))
        return self._scalars[value]

    def take_steps(self) -> int:
        """Decode steps run since the last call (one host read)."""
        taken, self._steps = self._steps, []
        return int(np.sum(jax.device_get(taken))) if taken else 0

    def calibrate(self, state: DecodeState) -> DecodeState:
        """Measures the width costs on ``state`` (donated; a batch job's live slots: the forced
        steps are exact and, where costs may be measured at all, emit the tokens any width
        would) unless they are settled (:attr:`measured`). A generation calls :meth:`prepare`."""
        return state if self.measured else self._measure(state)

    def _measure(self, state: DecodeState, restart=None) -> DecodeState:
        """:func:`~specjax.decode.costs.measure` on ``state``, its costs kept for the program
        and its time in :attr:`calibration_seconds`. On live rows (no ``restart``) a measurement
        the rows' ending cut short is made again at the next call; on a refilled scratch one
        that found no round is not (the costs stay guessed)."""
        start = time.perf_counter()
        costs, state = cost_source.measure(self, state, restart=restart)
        if costs is not None or restart is not None:
            PROGRAMS.costs[self.programs.key] = costs
        self.calibration_seconds += time.perf_counter() - start
        return state

    def prepare(self) -> None:
        """What a generation runs before its timing starts, on a scratch prefill of its prompts
        that it then discards: the width costs' measurement where it is due (:meth:`calibrate`;
        :attr:`calibration_seconds`), else the first run of the programs this run compiled
        (XLA's first run of a program is slower: added to :attr:`compile_seconds`). Both happen
        once per program in a process."""
        if not self.measured:
            self._measure(self.start(), restart=self.start)
        elif self.compiled:
            start = time.perf_counter()
            jax.block_until_ready(self.decode(self.start(), 1).lengths)
            self.compile_seconds += time.perf_counter() - start
        self._steps = []  # (the scratch's steps are not the generation's)

    def timing(self, seconds: float, first: float, first_tokens: int) -> Timing:
        """The :class:`Timing` of a generation timed at ``seconds`` (the first step's below)."""
        return Timing(seconds, self.compile_seconds, first, first_tokens, self.calibration_seconds)

    def result(self, state: DecodeState, timing: Timing) -> Generation:
        counters = _counters(state)
        check_target(counters.stats, range(self.batch.rows))
        metrics = Metrics.from_state(counters, timing)
        return Generation(outputs(counters, self.batch.rows), metrics, self.compiled)


def generate_local(
    target: PureModel | Decoder,
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
      target: the target model (a :class:`~specjax.models.Decoder` as loaded, or its
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
    run = Run.of(target, drafter, prompts, config, seed, mesh, buckets)
    run.prepare()  # (first runs of new programs; adaptive widths' costs)
    start = time.perf_counter()
    state = run.decode(run.start(), 1)
    first_lengths = jax.device_get(state.lengths)  # waits for the first step
    first = time.perf_counter() - start
    state = jax.block_until_ready(run.decode(state, UNLIMITED))
    seconds = time.perf_counter() - start
    first_tokens = int(np.sum((first_lengths - run.batch.lengths)[: run.batch.rows]))
    return run.result(state, run.timing(seconds, first, first_tokens))
