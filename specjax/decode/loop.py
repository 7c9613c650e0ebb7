"""Whole generations on one device or a mesh: :func:`generate` and its :class:`Run`.

A generation is two compiled programs: *prefill* (prompts -> :class:`DecodeState`) and *decode*
(``step`` under ``lax.while_loop`` for at most ``max_steps`` steps or until every row is done;
the state is donated, so caches are updated in place). :func:`generate` runs decode once for the
first step (timing the first token) and once for the rest;
:class:`~specjax.decode.stream.Stream` runs it one step per call. Inputs are padded to
:class:`~specjax.decode.buckets.ShapeBuckets`, and compiled programs are kept per shape, so
prompts of different lengths reuse the same two programs. A generation whose width controller
would never draft runs the autoregressive programs (:meth:`Run.plain`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from specjax import sharding
from specjax.decode import acceptance, adaptive, calibration, widths
from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.calibration import Calibration
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
from specjax.decode.programs import PROGRAMS, ProgramCache
from specjax.decode.state import DecodeState, check_target
from specjax.drafters.base import catches_up
from specjax.models.decoder import Decoder
from specjax.models.pure import PureModel, as_pure

UNLIMITED = np.iinfo(np.int32).max
"""``max_steps`` that runs decode until every row is done."""

SCRATCH_SEED = 0x5C7A7C
"""Added to a generation's seed (mod 2**31), with n - 1, for its calibration's n-th scratch
(:meth:`Run.prepare`): at temperature > 0 the scratches' draws are independent of the
generation's and of each other, so their forced drafting steps count towards the pair's prior at
once (at temperature 0 they are the generation's own verdicts: only after it, ``Run.pending``)."""

_NEVER = ProgramCache(256)
"""Per program and controller inputs: whether its generations never draft (:meth:`Run.plain`)."""


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


class Run:
    """One generation's inputs placed on devices, and its two compiled programs."""

    @classmethod
    def of(cls, target, drafter, prompts, config, seed, mesh, buckets) -> Run:
        """The run of ``prompts`` (checked and padded by :func:`prepare`)."""
        check_config(config)
        target = as_pure(target)
        drafter = couple(drafter, config) if config.speculative else None
        multiple = 1 if mesh is None else sharding.axis_size(mesh, "data")
        batch = prepare(target, drafter, prompts, config, buckets, multiple)
        run = cls(target, drafter, batch, config, seed, mesh)
        run.remake = lambda c: cls.of(target, None, prompts, c, seed, mesh, buckets)
        return run

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
        self.prefill, self.decode_executable, self.key = PROGRAMS.get(
            self.args, sizes, config, mesh, self.draft_tp
        )
        self.compile_seconds = time.perf_counter() - start
        self.compiled = PROGRAMS.compiled - before
        self.seed = int(seed)
        self._steps: list = []  # steps run by each decode call not yet taken
        self._scalars, self._policies = {}, {}
        self.counted = None  # the stats up to which the pair's acceptance counted this run
        self.calibration_seconds = 0.0  # spent by prepare() measuring the width costs
        self.pending = None  # acceptance its scratch calibration saw, counted after the run
        self.remake = None  # config -> the Run of the same prompts under it (Run.of's)
        self.as_widths = None  # (widths, L) a plain() run reports its steps under

    def start(self, scratch: int = 0) -> DecodeState:
        """Runs prefill; ``scratch`` n > 0: the n-th scratch, seeded anew (:data:`SCRATCH_SEED`)."""
        if not scratch:
            return self.prefill(*self.args)
        seed = np.int32((self.seed + SCRATCH_SEED + scratch - 1) % 2**31)
        return self.prefill(*self.args[:-1], self.put_scalar(seed))

    def calibration(self, create: bool = False) -> Calibration | None:
        """What :meth:`calibrate` has measured on this program so far (None: nothing yet,
        unless ``create``)."""
        if create and self.key not in PROGRAMS.calibrations:
            length, look = self.drafter.draft_len, adaptive.free_look(self.drafter)
            # A drafter without a free look learns only by drafting: its rows start from the
            # pair's counts, pooled and optimistic until known. One with a free look (n-gram)
            # sees each first verdict anyway, and its acceptance is the prompt's (copying or
            # not) more than the pair's: its program counts nothing (the default prior).
            pair = None if look else acceptance.of_pair(self.args[:2], self.config, length)
            record = Calibration.empty(len(self.config.widths), length, pair, not look)
            PROGRAMS.calibrations[self.key] = record
        return PROGRAMS.calibrations.get(self.key)

    def learn(self, stats) -> None:
        """Adds this generation's drafting steps not counted yet (``stats``: its final
        :class:`~specjax.decode.state.StepStats`, a host copy) to the pair's acceptance, where
        generations teach it (:func:`~specjax.decode.acceptance.learns`), then what its scratch
        calibration saw (held back until now: :func:`~specjax.decode.calibration.calibrate`)."""
        if acceptance.teach(self, self.counted, stats):
            self.counted = stats
        self._count_pending()

    def _count_pending(self) -> None:
        """Adds what the scratch calibration saw to the pair's counts (once)."""
        record = self.calibration()
        if record is not None and self.pending is not None:
            record.pair.add(self.pending)
        self.pending = None

    def forget_calibration(self) -> None:
        """Drops this program's measurements (the next call measures again)."""
        PROGRAMS.calibrations.pop(self.key, None)

    @property
    def costs(self) -> np.ndarray:
        """The width costs the controller uses: given, measured (:meth:`calibrate`; the
        estimates so far while a short generation cut the measurement off), or guessed."""
        if self.config.width_costs:
            return np.asarray(self.config.width_costs, np.float32)
        record = self.calibration()
        if record is not None and record.costs is not None:
            return record.costs
        return widths.guess_costs(self.config.widths, self.drafter.num_paths)

    @property
    def prior(self) -> np.ndarray:
        """``[L]`` the acceptance a row's estimates start from: the pair's, measured with the
        costs, or :func:`~specjax.decode.widths.default_prior` where costs are given."""
        record = None if self.config.width_costs else self.calibration()
        if record is None:
            return widths.default_prior(self.drafter.draft_len)
        return record.prior

    @property
    def switch(self) -> tuple[float, float]:
        """What a probe costs beyond its step, in width-0 steps: ``(switch, catch_up per
        width-0 step)`` (:meth:`Calibration.switch_costs`; zeros where costs are given)."""
        record = None if self.config.width_costs else self.calibration()
        return (0.0, 0.0) if record is None else record.switch_costs(catches_up(self.drafter))

    @property
    def calibrated(self) -> bool:
        """Whether the controller's costs and prior are settled: given, measured to the end, or
        not read (no widths, or a forced or random policy)."""
        record = self.calibration()
        return (
            not self.config.widths
            or bool(self.config.width_costs)
            or self.config.force_width != widths.AUTO
            or (record is not None and record.done)
        )

    def decode(
        self,
        state: DecodeState,
        max_steps: int,
        force: int = widths.AUTO,
        until_done: int | None = None,
    ) -> DecodeState:
        """At most ``max_steps`` steps on ``state`` (donated: do not use it afterwards), ending
        early once ``until_done`` rows are done (default: all); ``force``: the width policy
        (:data:`~specjax.decode.widths.AUTO`, or a width index)."""
        steps = self._scalar(max_steps)
        until = self._scalar(state.batch if until_done is None else until_done)
        policy = None
        if self.config.widths:
            force = self.config.force_width if force == widths.AUTO else force
            policy = self._policy(force)
        state, steps_run = self.decode_executable(
            self.target, self.drafter, state, steps, until, policy
        )
        self._steps.append(steps_run)  # device scalars, read by take_steps
        return state

    def _policy(self, force: int) -> widths.Policy:
        """The controller's inputs on device, kept per (costs, prior, switch, force), and per
        force alone once they are settled (:attr:`calibrated`): a streamed sub-millisecond step
        should pay neither four host-to-device copies nor the ~50 µs of reading them again."""
        settled = ("settled", force)
        if settled in self._policies:
            return self._policies[settled]
        key, host = self._host_policy(force)
        if key not in self._policies:
            self._policies[key] = jax.tree.map(self.put_scalar, host)
        if self.calibrated:
            self._policies[settled] = self._policies[key]
        return self._policies[key]

    def _host_policy(self, force: int) -> tuple[tuple, widths.Policy]:
        """``(key, policy)``: the controller's inputs as host values, and the key they are kept
        under (costs, prior, switch, force)."""
        costs, prior, (switch, catch_up) = self.costs, self.prior, self.switch
        key = (costs.tobytes(), prior.tobytes(), switch, catch_up, force)
        inputs = (costs, np.int32(force), prior, np.float32(switch), np.float32(catch_up))
        return key, widths.Policy(*inputs)

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
        """Measures the width costs on ``state`` (donated; continuous batching's live slots: the
        forced steps are exact, their tokens kept), once per program, unless they are settled or
        unread (:attr:`calibrated`: a forced or random policy's steps, and a seed's sample, do
        not depend on timing). A generation calls :meth:`prepare`."""
        if self.calibrated:
            return state
        return calibration.calibrate(self, state)

    def prepare(self) -> None:
        """What a generation runs before its timing starts, on a scratch prefill of its prompts
        that it then discards: the width calibration where it is due (:meth:`calibrate`,
        refilling the scratch when its rows finish; :attr:`calibration_seconds`), else the
        first run of the programs this run compiled (XLA's first run of a program is slower, a
        quarter of a second for the SmolLM2 head's decode program: added to
        :attr:`compile_seconds`). Both happen once per program in a process."""
        start = time.perf_counter()
        if not self.calibrated:
            scratch = lambda n=0: self.start(scratch=n + 1)
            calibration.calibrate(self, scratch(), restart=scratch)
            if not self.config.sampling.greedy:  # its own draws: no verdict of this generation
                self._count_pending()
            self.calibration_seconds += time.perf_counter() - start
        elif self.compiled:
            jax.block_until_ready(self.decode(self.start(), 1).lengths)
            self.compile_seconds += time.perf_counter() - start
        self._steps = []  # (the scratch's steps are not the generation's)

    def plain(self) -> Run:
        """The run to time after :meth:`prepare`: this one, or where the width controller would
        take width 0 at every step (:func:`~specjax.decode.adaptive.never_drafts`), the
        autoregressive run of the same prompts (the baseline's programs, the same tokens: a
        width-0 step is an autoregressive step with the same keys), reporting width-0 steps."""
        config = self.config
        if not config.widths or self.remake is None or not self.calibrated:
            return self
        key, policy = self._host_policy(config.force_width)
        steps = config.max_new_tokens  # (a generation's steps at most)
        never = lambda: adaptive.never_drafts(self.drafter, policy, config.widths, steps)
        if not _NEVER.get((self.key, *key), never)[0]:
            return self
        self._count_pending()  # (this generation has decided its widths)
        run = self.remake(config.autoregressive())
        run.prepare()
        run.as_widths = (config.widths, self.drafter.draft_len)
        run.compile_seconds += self.compile_seconds
        run.calibration_seconds += self.calibration_seconds
        return run

    def timing(self, seconds: float, first: float, first_tokens: int) -> Timing:
        """The :class:`Timing` of a generation timed at ``seconds`` (the first step's below)."""
        return Timing(seconds, self.compile_seconds, first, first_tokens, self.calibration_seconds)

    def result(self, state: DecodeState, timing: Timing) -> Generation:
        counters = _counters(state)
        check_target(counters.stats, range(self.batch.rows))
        self.learn(counters.stats)
        metrics = Metrics.from_state(counters, timing)
        if self.as_widths is not None:
            metrics = metrics.at_width_zero(*self.as_widths)
        return Generation(outputs(counters, self.batch.rows), metrics, self.compiled)


def generate(
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
    run.prepare()  # (first runs of new programs; adaptive widths' calibration)
    run = run.plain()
    start = time.perf_counter()
    state = run.decode(run.start(), 1)
    first_lengths = jax.device_get(state.lengths)  # waits for the first step
    first = time.perf_counter() - start
    state = jax.block_until_ready(run.decode(state, UNLIMITED))
    seconds = time.perf_counter() - start
    first_tokens = int(np.sum((first_lengths - run.batch.lengths)[: run.batch.rows]))
    return run.result(state, run.timing(seconds, first, first_tokens))
