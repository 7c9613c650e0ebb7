"""What the width controller needs to know about a compiled program, measured on it.

The automatic width policy (:mod:`specjax.decode.widths`) weighs each width's expected tokens
against its cost. :func:`calibrate` measures, once per compiled program, by running real decode
steps forced at each width (their tokens are kept: every width is an exact step):

* **the cost of a step at each width** relative to a width-0 step. One estimate is the time of a
  call of ``1 + n`` steps less that of a one-step call, per extra step, so the cost of a call
  itself (dispatch and reading the counters: as much as a sub-millisecond step) cancels. The
  long call must run long enough for the first steps of a call (slower than the rest) to weigh
  little: ``n`` is sized so that a width-0 long call runs :data:`SECONDS`, from a pilot estimate
  of a width-0 step. Sub-millisecond steps take the median of :data:`REPEATS` estimates.
* **what a probe costs beyond its step**: a drafting step right after a run of width-0 steps
  against one right after a drafting step (the draft catching up the tokens it missed, and the
  change of loop), in width-0 steps (:attr:`Calibration.switch_cost`).
* **the pair's acceptance**: per draft position, how often the forced drafting steps accepted it
  when they reached it. It is the prior of each row's estimates (:attr:`Calibration.prior`), so
  a pair whose drafts do not pay for their steps takes one-token steps from the start instead of
  learning it again in every generation from probes, which cost a drafting step, the draft's
  catch-up and a switch of widths each. For a drafter without a free look (a model draft or a
  learned head, which learns only by drafting) acceptance is the pair's, not the program's: the
  programs of one pair (prompt buckets, batch sizes) pool their counts
  (:mod:`specjax.decode.acceptance`), and every :func:`~specjax.decode.loop.generate` and
  ``Stream`` of the pair adds its drafting steps too (``Run.learn``). An n-gram drafter keeps
  its program's own counts. A program calibrated later starts from all of that. A calibrated
  program fixes its prior once the pair's acceptance is known well
  (:attr:`Calibration.settled`); from then on its repeated calls with one seed agree.

The usual rounds (:data:`REPEATS` for sub-millisecond steps, else one, or :data:`SLOW_REPEATS`
for a drafter without a free look at its proposals) end the measurement when
the choice it leads to is clear (:meth:`Calibration.clear`): the same first width whichever way
the acceptance estimates err by a standard error, and the costs by theirs. Otherwise, for a
drafter without a free look at its proposals, it goes on for up to :data:`MORE` times as many
rounds: such a drafter's rows start from the prior and decide on a slow level that the prior
weighs in for several observations (:data:`~specjax.decode.widths.PRIOR_WEIGHT`). Measuring
longer costs little exactly then: a choice that close means both widths give about the same
tokens per second, and every forced step is an exact step whose tokens are kept. (One round
gave the SmolLM2 head, whose 45 ms drafting steps pay by about 10% on the CPU, about six
drafting steps and a prior of 0.40 / 0.54 / 0.18 against 0.49 / 0.53 / 0.59 over 770 steps.)

A generation whose rows finish before every estimate is made keeps what it measured
(:class:`Calibration`, kept per program in ``PROGRAMS.calibrations``); the next call of the
program measures the rest, and meanwhile the controller uses the estimates so far.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode import adaptive, widths
from specjax.decode.acceptance import Acceptance

SECONDS, STEPS, REPEATS, PILOT = 0.025, (3, 64), 7, 3
"""How long a width-0 long call should run, the bounds of the extra steps of a long call, the
estimates per width (median) when ``STEPS[0]`` width-0 steps take less than ``SECONDS``, and the
extra steps of the pilot call that sizes the long calls."""

SLOW_REPEATS = 3
"""The usual rounds when steps are not sub-millisecond, for a drafter without a free look at its
proposals: its rows decide from the costs and the prior at their first step, and the median of
one round is one round (on the 2-core VM one round put the SmolLM2 head's width-3 cost at 2.09
where it is about 1.6, and the rows of that prompt bucket then took one-token steps)."""

MORE = 3
"""Up to this many times the usual rounds while the choice is not clear
(:meth:`Calibration.clear`)."""

COST_NOISE = 0.06
"""The least relative spread :meth:`Calibration.cost_error` assumes of one round's cost
estimate: on this project's 2-core VM one round of the SmolLM2 head's width-3 cost ranged
1.29-1.73 around a steady 1.57 (a spread of about 6-7%)."""


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
      done: whether every estimate is made (then :attr:`costs` and :attr:`prior` are settled).
      settled: the prior, fixed at the first read once :attr:`done` and the pair's acceptance
        is known (:attr:`Acceptance.known`; None before): the pair's counts keep growing, but
        a settled program's controller stays as it is, so repeated calls with one seed take the
        same widths.
      optimistic: whether rows start from the pair's upper confidence bound while it is not
        known: for a drafter without a free look, which learns only by drafting. (An n-gram
        drafter sees each proposal's first verdict for free; it keeps its program's own counts
        and their estimate. Pooled and optimistic, its L positions' prior made it draft in
        vain after a copy prompt: 19 drafting steps instead of 7 on a chat prompt, 0.89x.)
    """

    seconds: list[list[float]]
    pair: Acceptance
    switch: list[float] = dataclasses.field(default_factory=list)
    pilot: float | None = None
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
        """``[W]`` relative width costs: per width, the median over rounds of its estimate over
        width 0's of the same round (measured a fraction of a second apart, so a machine that
        slows down for a while slows both); None without an estimate for every width, or if
        noise made a drafting step look cheaper than a one-token step."""
        ratios = self._ratios()
        if ratios is None:
            return None
        costs = np.asarray([1.0] + [np.median(r) for r in ratios], np.float32)
        return costs if np.all(costs[1:] >= 1.0) else None

    def _ratios(self) -> list[np.ndarray] | None:
        """Per drafting width, its per-round estimates over width 0's (None: a width has none)."""
        if not all(self.seconds):
            return None
        base = np.asarray(self.seconds[0])
        return [np.asarray(t[: len(base)]) / base[: len(t)] for t in self.seconds[1:]]

    def cost_error(self) -> float:
        """The relative standard error of the drafting widths' costs: the spread of their
        per-round ratios (at least :data:`COST_NOISE`, what one round varies by on a quiet
        machine) over the square root of the rounds."""
        ratios = self._ratios()
        if not ratios:
            return 0.0
        spread = max(
            [COST_NOISE] + [float(np.std(r, ddof=1) / np.median(r)) for r in ratios if len(r) > 1]
        )
        return spread / np.sqrt(min(map(len, ratios)))

    def clear(self, widths_: tuple[int, ...]) -> bool:
        """Whether the estimates so far give a row's first step the same width whichever way
        they err by a standard error: the acceptance estimates all lower or all higher by a
        binomial one, the drafting widths' costs all lower or all higher by
        :meth:`cost_error`."""
        costs = self.costs
        if costs is None:
            return False
        prior, error = self.pair.prior.astype(np.float64), self.pair.error  # [L], [L]
        scale = 1.0 + self.cost_error() * np.asarray([0.0] + [1.0] * (len(costs) - 1))  # [W]
        corners = [(a, c) for a in (-1, 1) for c in (-1, 1)]
        picks = {
            _pick(np.clip(prior + a * error, 0.0, 1.0), costs * scale**c, widths_)
            for a, c in corners
        }
        return len(picks) == 1

    @property
    def switch_cost(self) -> float:
        """:attr:`switch` in width-0 steps (median; 0 before any estimate)."""
        if not self.switch or not self.seconds[0]:
            return 0.0
        return float(max(np.median(self.switch), 0.0) / np.median(self.seconds[0]))

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


def _pick(accept: np.ndarray, costs: np.ndarray, widths_: tuple[int, ...]) -> int:
    """The width index :func:`widths.choose` gives a row whose estimates are ``accept [L]``
    (no probe, the drafter able to propose L tokens)."""
    row = jnp.asarray(accept, jnp.float32)[None, :]  # [1, L]
    hint, active = jnp.full((1,), row.shape[1], jnp.int32), jnp.ones((1,), bool)
    return int(widths.best_width(row, jnp.asarray(costs), hint, active, widths_)[1])


def calibrate(run, state):
    """Measures ``run``'s program (a :class:`~specjax.decode.loop.Run`) on ``state`` (donated),
    once per program, and returns the state after the steps it ran. See the module docstring."""
    last = state
    for last in calls(run, state):  # noqa: B007 (the last state is the result)
        pass
    return last


def calls(run, state):
    """:func:`calibrate` one decode call at a time: yields the state after each call (read it
    before resuming: the next call donates it), so a stream can show the tokens as they come.
    The measurements are complete once the generator is exhausted; ``run.counted`` is then the
    stats up to which the pair's acceptance has counted this generation's steps."""
    record = run.calibration(create=True)
    mark = [jax.device_get(state.stats)]  # the stats up to which acceptance is counted

    def tally(state) -> None:
        """Counts the acceptance of the steps since the last tally."""
        now = jax.device_get(state.stats)
        record.pair.count(mark[0], now)
        mark[0] = now

    last = state
    for last in _measure(run, record, state, tally):
        yield last
    tally(last)
    run.counted = mark[0]
    if record.done and record.costs is None:  # noise won: measure again next call
        run.forget_calibration()


def _measure(run, record: Calibration, state, tally):
    """The timed calls of :func:`calls` (the state after each), adding to ``record`` (its
    acceptance counts through ``tally(state)``); stops early, the estimates so far kept, once
    every row is done."""
    n_widths = len(run.config.widths)

    def timed(state, n: int, force: int):
        """(state, seconds, steps taken at width ``force``, every row done) of one call."""
        before = jax.device_get(state.control.steps)[force]
        start = time.perf_counter()
        state = run.decode(state, n, force=force)
        taken, done = jax.device_get((state.control.steps, state.done))
        return state, time.perf_counter() - start, taken[force] - before, bool(np.all(done))

    if not record.warm:  # untimed: a width's first run is slower (10 ms, not 2)
        for i in range(n_widths):
            state = run.decode(state, 1, force=i)
            yield state
        record.warm = True
    if record.pilot is None:
        state, short, _, _ = timed(state, 1, 0)
        yield state
        state, pilot, n_pilot, done = timed(state, 1 + PILOT, 0)
        yield state
        if n_pilot > 1:  # (a call cut short by the rows finishing tells too little)
            record.pilot = (pilot - short) / (n_pilot - 1) if pilot > short else pilot / n_pilot
        if done:
            return
    low, high = STEPS
    per_step = max(record.pilot or 0.0, 1e-6)
    extra = int(np.clip(np.ceil(SECONDS / per_step), low, high))
    # A drafter with a free look at its proposals (n-gram lookup) is steered by them, not by
    # the prior: one round of slow steps, and its usual rounds in all, are enough.
    look = adaptive.free_look(run.drafter)
    repeats = REPEATS if per_step * low < SECONDS else 1 if look else SLOW_REPEATS
    per_width = record.seconds
    after_idle = False  # whether the latest call was a run of width-0 steps
    most = repeats if look else MORE * repeats
    for _ in range(2 * most):  # rounds (a timing swamped by noise gives no estimate)
        rounds = min(map(len, per_width))
        tally(state)
        if rounds >= most or (rounds >= repeats and record.clear(run.config.widths)):
            break
        for i in sorted(range(n_widths), key=lambda i: len(per_width[i])):  # fewest first
            state, short, n_short, done = timed(state, 1, i)
            yield state
            if done:
                return
            known = per_width[i]  # a long call runs about SECONDS at every width
            n = extra if not known else int(np.clip(np.ceil(SECONDS / np.median(known)), low, high))
            state, long, n_long, done = timed(state, 1 + n, i)
            yield state
            if n_long > n_short and long > short:  # (a long call cut short still counts)
                per_width[i].append((long - short) / (n_long - n_short))
            if i == 1 and after_idle and not done:  # after its own width, against after idling
                state, again, n_again, done = timed(state, 1, i)
                yield state
                if n_short == n_again == 1:
                    record.switch.append(short - again)
            after_idle = i == 0
            if done:
                return
    record.done = True
