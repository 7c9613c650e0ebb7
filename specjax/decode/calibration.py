"""What the width controller needs to know about a compiled program, measured on it.

The automatic width policy (:mod:`specjax.decode.widths`) weighs each width's expected tokens
against its cost. :func:`calibrate` measures, once per compiled program, by timing decode calls
forced at each width:

* **the cost of a step at each width** relative to a width-0 step. One estimate is the time of a
  call of ``1 + n`` steps less that of a one-step call, per extra step, so the cost of a call
  itself (dispatch and reading the counters: as much as a sub-millisecond step) cancels. The
  long call must run long enough for the first steps of a call (slower than the rest) to weigh
  little: ``n`` is sized so that a width-0 long call runs :data:`SECONDS`, from a pilot estimate
  of a width-0 step. Sub-millisecond steps take the median of :data:`REPEATS` estimates, slower
  ones of :data:`SLOW_REPEATS`, measuring more rounds until that many agree (:data:`AGREE`).
* **what a probe costs beyond its step**: a drafting step right after a run of width-0 steps
  against one right after a drafting step (the draft catching up the tokens it missed, and the
  change of loop), in width-0 steps (:meth:`Calibration.switch_costs`). A model draft's
  catch-up grows with the width-0 steps it missed (one forward per ``CATCH_UP`` tokens): its
  switch is booked per width-0 step, so a probe after a long idle run is priced as such.

``generate`` and ``Stream`` calibrate before their timing starts, on a scratch prefill of their
own prompts that they then discard (refilled if its rows finish first), so the time is reported
on its own (``Metrics.calibration_seconds``, like compilation: once per program in a process)
and a generation's tokens never pay for it. Measured on the generation itself, a one-shot run
paid it in its own steps: the README's Shakespeare command ran at 0.62x autoregressive (fixed
drafting 0.85x) and the SmolLM2 head's config at 0.67x, the generation over before the
controller had chosen a single width. Continuous batching measures on its live slots (their
forced steps are exact steps whose tokens are kept) and, if they all finish first, the next call
measures the rest while the controller uses the estimates so far.

The forced drafting steps' verdicts count towards the prior of later generations (a sample the
controller did not select: its own drafting stops after a run of rejections, and a pair whose
counts came only from it stayed at one-token steps on 10 prompts in a row, one where fixed
drafting ran 1.44x). On a scratch of the generation's prompts they are added once that
generation has ended (``Run.learn``), not before: they would hand its controller its own
verdicts in advance. A row's prior (:attr:`Calibration.prior`) is the pair's acceptance
(:mod:`specjax.decode.acceptance`): for a drafter without a free look (a model draft or a
learned head) pooled over the programs of the pair and the drafting steps of its generations,
optimistic until known. An n-gram drafter, steered by its free look at each proposal, counts
nothing: its acceptance is the prompt's (copying or not), so its rows start every generation
from :func:`~specjax.decode.widths.default_prior`. A calibrated program fixes its prior once
the pair's acceptance is known well (:attr:`Calibration.settled`); from then on its repeated
calls with one seed agree.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

from specjax.decode import acceptance, adaptive
from specjax.decode.acceptance import Acceptance

SECONDS, STEPS, REPEATS, PILOT = 0.025, (3, 64), 7, 3
"""How long a width-0 long call should run, the bounds of the extra steps of a long call, the
estimates per width (median) when ``STEPS[0]`` width-0 steps take less than ``SECONDS``, and the
extra steps of the pilot call that sizes the long calls."""

SLOW_REPEATS = 3
"""The rounds when steps are not sub-millisecond. The median of one round is one round: on the
2-core VM one round put the SmolLM2 head's width-3 cost at 2.09 where it is about 1.6, and the
rows of that prompt bucket then took one-token steps. A drafter with a free look at its
proposals (n-gram lookup) needs them too: it sees only its first token's verdicts at width 0,
so a cost read too high can rule out drafting for good. One round put SmolLM2's n-gram width-6
step at 2.2 one-token steps or more (1.37-2.12 in 12 other rounds), where even a first token
always right leaves the later positions' prior (0.35) short of paying, and MT-bench 90, which
copies its input, ran 1.00x against fixed drafting's 1.77x (BENCHMARKS.md, "Adaptive draft
width", session 20)."""

AGREE, MORE = 1.25, 3
"""When a program's rounds agree: the ``repeats`` closest estimates of each width's cost lie
within a factor :data:`AGREE`; until then calibration measures more rounds, at most ``MORE``
times the usual, and the costs are the median of those closest estimates
(:meth:`Calibration.costs`). A one-off slow call is not noise around the cost: in a fresh
process the first step that reaches a larger attention window (``models.attention``) runs that
branch for the first time, 50-150 ms instead of 15-25, and the copy prompt's scratch, which
grows 7 tokens a step, crossed 256 tokens inside calibration. Two such calls in three rounds
(one slowing a width-6 long call, one a width-0 short call) read its width-6 cost at 2.8-3.5
where it is 1.5, and the generation took 30-80 one-token steps of a copy before it drafted."""


@dataclasses.dataclass
class Calibration:
    """The measurements of one compiled program so far (kept across generations).

    Attributes:
      seconds: per width, the estimates of seconds per step so far.
      pair: the pair's acceptance counts, shared with its other programs (:class:`Acceptance`).
      switch: estimates of how much longer (seconds) a step at ``widths[1]`` takes right after
        a run of width-0 steps than after one at its own width: the draft's catch-up of the
        tokens it missed, and the change of loop (what a probe costs beyond its step).
      pilot: the pilot estimate of a width-0 step's seconds (None: not made yet).
      warm: whether every width has run once (a width's first run is slower: 10 ms, not 2).
      done: whether every estimate is made (then :attr:`costs` are settled).
      repeats: the rounds whose estimates must agree (:data:`AGREE`; 0 before the first).
      settled: the prior, fixed at the first read once :attr:`done` and the pair's acceptance
        is known (:attr:`Acceptance.known`; None before): the pair's counts keep growing, but
        a settled program's controller stays as it is, so repeated calls with one seed take the
        same widths.
      optimistic: whether rows start from the pair's upper confidence bound while it is not
        known: for a drafter without a free look, which learns only by drafting. An n-gram
        drafter sees each proposal's first verdict for free, and what it copies is the
        prompt's: its program counts nothing and its rows start from the default prior.
        Pooled and optimistic, the counts of a copy prompt made it draft in vain on the chat
        prompts after it (19 drafting steps instead of 7 on one, 0.89x); kept per program,
        the forced steps of the first prompt of a bucket set the prior of every later one
        (the poem prompt's 0.81 on later positions drafted MT-bench 88 for 18 steps at block
        efficiency 1.06, 0.94x; 4 steps from the default prior).
    """

    seconds: list[list[float]]
    pair: Acceptance
    switch: list[float] = dataclasses.field(default_factory=list)
    switch_idle: list[int] = dataclasses.field(default_factory=list)
    pilot: float | None = None
    repeats: int = 0
    warm: bool = False
    done: bool = False
    settled: np.ndarray | None = None
    optimistic: bool = True

    @classmethod
    def empty(
        cls,
        num_widths: int,
        draft_len: int,
        pair: Acceptance | None = None,
        optimistic: bool = True,
    ) -> Calibration:
        pair = Acceptance.empty(draft_len) if pair is None else pair
        return cls([[] for _ in range(num_widths)], pair, optimistic=optimistic)

    @property
    def costs(self) -> np.ndarray | None:
        """``[W]`` relative width costs: per width, the median of its estimates over width 0's
        of the same round (measured a fraction of a second apart, so a machine that slows
        down for a while slows both), over the :attr:`repeats` closest of them where they
        agree (:data:`AGREE`), else over all; None without an estimate for every width, or if
        noise made a drafting step look cheaper than a one-token step."""
        ratios = self._ratios()
        if ratios is None:
            return None
        costs = np.asarray([1.0] + [np.median(_closest(r, self.repeats)) for r in ratios])
        return costs.astype(np.float32) if np.all(costs[1:] >= 1.0) else None

    @property
    def agreed(self) -> bool:
        """Whether every width has :attr:`repeats` estimates that agree (:data:`AGREE`)."""
        ratios = self._ratios()
        if ratios is None or min(map(len, self.seconds)) < self.repeats:
            return False
        return all(_spread(_closest(r, self.repeats)) <= AGREE for r in ratios)

    def _ratios(self) -> list[np.ndarray] | None:
        """Per drafting width, its per-round estimates over width 0's (None: a width has none)."""
        if not all(self.seconds):
            return None
        base = np.asarray(self.seconds[0])
        return [np.asarray(t[: len(base)]) / base[: len(t)] for t in self.seconds[1:]]

    @property
    def switch_cost(self) -> float:
        """:attr:`switch` in width-0 steps (median; 0 before any estimate)."""
        if not self.switch or not self.seconds[0]:
            return 0.0
        return float(max(np.median(self.switch), 0.0) / np.median(self.seconds[0]))

    def switch_costs(self, grows: bool) -> tuple[float, float]:
        """``(switch, catch_up)`` for :class:`~specjax.decode.widths.Policy`: the switch in
        width-0 steps, all of it per width-0 step missed (over the :attr:`switch_idle` steps
        before each estimate) for a drafter whose catch-up ``grows`` with them (a model
        draft); else a switch of its own."""
        if not grows:
            return self.switch_cost, 0.0
        idle = float(np.median(self.switch_idle)) if self.switch_idle else 0.0
        return 0.0, (self.switch_cost / idle if idle > 0 else 0.0)

    @property
    def prior(self) -> np.ndarray:
        """``[L]`` what a row's estimates start from: the pair's acceptance per draft position
        (:attr:`Acceptance.prior`); before it is known, its upper confidence bound
        (:attr:`Acceptance.upper`) where :attr:`optimistic`. Fixed as :attr:`settled` at the
        first read once this program is calibrated and the pair's acceptance known."""
        if self.settled is None and self.done and self.pair.known:
            self.settled = self.pair.prior
        if self.settled is not None:
            return self.settled
        return self.pair.upper if self.optimistic and not self.pair.known else self.pair.prior


def _closest(values: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` of ``values`` that lie within the smallest factor of each other (all of them
    if there are no more than ``k``, or if ``k`` is 0)."""
    values = np.sort(np.asarray(values, np.float64))
    if k <= 0 or len(values) <= k:
        return values
    spreads = values[k - 1 :] / np.maximum(values[: len(values) - k + 1], 1e-12)
    start = int(np.argmin(spreads))
    return values[start : start + k]


def _spread(values: np.ndarray) -> float:
    """max / min of positive ``values``."""
    return float(np.max(values) / max(np.min(values), 1e-12))


def calibrate(run, state, restart=None):
    """Measures ``run``'s program (a :class:`~specjax.decode.loop.Run`) on ``state`` (donated),
    once per program, and returns the state after the steps it ran. See the module docstring.

    Args:
      run: the run whose program is measured.
      state: a state of that program, donated.
      restart: a callable giving a fresh state to go on with once every row of the measured
        one is done, given how many came before it (``generate`` measures on a scratch prefill
        of its prompts and refills it with new draws); None: stop there, the estimates so far
        kept for the next call (continuous batching measures on its live slots).
    """
    record = run.calibration(create=True)
    seen = Acceptance.empty(run.drafter.draft_len)  # what the forced drafting steps reached
    state = _measure(run, record, state, restart, seen)
    if not adaptive.free_look(run.drafter):  # (n-gram rows start from the default prior)
        if restart is not None:  # a scratch of the generation's prompts: counted once it ended
            run.pending = seen
        elif not acceptance.learns(run.config, run.drafter):  # live steps no finished row counts
            record.pair.add(seen)
    if record.done and record.costs is None:  # noise won: measure again next call
        run.forget_calibration()
    return state


def _agreed(seconds: float) -> float:
    """``seconds`` as process 0 measured them. Every process of a multi-process run must give its
    programs the same arguments (a call's step count sized from its own timings would run loops
    of different lengths around the same collectives) and end with the same costs (or its
    devices would take other widths): each decides from process 0's timings."""
    if jax.process_count() == 1:
        return seconds
    return float(multihost_utils.broadcast_one_to_all(np.float32(seconds)))


def _measure(run, record: Calibration, state, restart, seen: Acceptance):
    """The timed calls of :func:`calibrate`, adding to ``record`` (and the draft positions
    they reached and accepted to ``seen``); returns the last state."""
    n_widths = len(run.config.widths)
    stopped = False  # every row done, and nothing to restart with
    restarts = 0  # fresh states so far
    mark = jax.device_get(state.stats)  # counted up to here

    def timed(n: int, force: int):
        """(seconds, steps taken at width ``force``) of one call on the current state."""
        nonlocal state, stopped, restarts, mark
        before = jax.device_get(state.control.steps)[force]
        start = time.perf_counter()
        state = run.decode(state, n, force=force)
        taken, done = jax.device_get((state.control.steps, state.done))
        seconds = _agreed(time.perf_counter() - start)
        now = jax.device_get(state.stats)
        seen.count(mark, now)
        mark = now
        if np.all(done):
            if restart is None:
                stopped = True
            else:  # untimed: a fresh state's first steps are slower, a lazy draft reads the prompt
                state, restarts, mark = restart(restarts + 1), restarts + 1, None
                state = run.decode(state, 1, force=n_widths - 1)
        return seconds, taken[force] - before

    if not record.warm:  # untimed: a width's first run is slower (10 ms, not 2)
        for i in range(n_widths):
            timed(1, i)
            if stopped:
                return state
        record.warm = True
    for _ in range(3):  # (a pilot cut short by the rows finishing tells too little)
        if record.pilot is not None:
            break
        short, _ = timed(1, 0)
        pilot, n_pilot = timed(1 + PILOT, 0)
        if n_pilot > 1:
            record.pilot = (pilot - short) / (n_pilot - 1) if pilot > short else pilot / n_pilot
        if stopped:
            return state
    low, high = STEPS
    per_step = max(record.pilot or 0.0, 1e-6)
    extra = int(np.clip(np.ceil(SECONDS / per_step), low, high))
    repeats = record.repeats = REPEATS if per_step * low < SECONDS else SLOW_REPEATS
    per_width = record.seconds
    after_idle, idle_steps = False, 0  # whether the latest calls were width-0 steps, how many
    for _ in range(MORE * repeats):  # rounds (a timing swamped by noise gives no estimate)
        if record.agreed:
            break
        for i in sorted(range(n_widths), key=lambda i: len(per_width[i])):  # fewest first
            short, n_short = timed(1, i)
            if stopped:
                return state
            known = per_width[i]  # a long call runs about SECONDS at every width
            n = extra if not known else int(np.clip(np.ceil(SECONDS / np.median(known)), low, high))
            fresh = restarts
            long, n_long = timed(1 + n, i)
            if n_long > n_short and long > short:  # (a long call cut short still counts)
                per_width[i].append((long - short) / (n_long - n_short))
            if stopped:
                return state
            if i == 1 and after_idle and restarts == fresh:  # after its own width vs after idling
                again, n_again = timed(1, i)
                if n_short == n_again == 1:
                    record.switch.append(short - again)
                    record.switch_idle.append(idle_steps)
                if stopped:
                    return state
            after_idle, idle_steps = i == 0, n_short + n_long  # (the idle run's length if so)
    record.done = True
    return state
