"""The width controller's costs (``Run.calibrate``): measured only where they steer
something, before a generation's timing on a scratch of its prompts, once per program.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax import sampling
from specjax.decode import DecodeConfig, Stream, calibration, generate
from specjax.decode import widths as W
from specjax.decode.buckets import DEFAULT
from specjax.decode.calibration import Calibration
from specjax.decode.seams import PROGRAMS, Run
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.drafters.base import catches_up
from tests.test_widths import (  # noqa: F401 (fixtures)
    GREEDY,
    NEW_TOKENS,
    PROMPTS,
    autoregressive,
    models,
)

TOKENS = 10
"""The length of the generation and the stream below: one greedy program with widths (0, 3)."""


def test_random_widths_sample_repeats_whatever_the_timing(models):  # noqa: F811
    """At T = 1 under the random policy a seed gives one sample: nothing is calibrated (the costs
    steer nothing), so the widths and draws do not depend on how long a step took. A slowed
    first call (as a mesh or a loaded machine would give) used to take other widths."""
    target, draft = models
    params = sampling.SamplingParams(1.0)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=params)
    cfg = DecodeConfig("block", params, 12, widths=(0, 1, 3), width_policy="random")
    PROGRAMS.calibrations.clear()
    first = generate(target, PROMPTS, cfg, drafter, seed=6)
    assert not PROGRAMS.calibrations, PROGRAMS.calibrations  # nothing measured
    again = generate(target, PROMPTS, cfg, drafter, seed=6)
    assert again.tokens == first.tokens
    assert again.metrics.width_steps == first.metrics.width_steps


def test_a_generation_calibrates_before_its_timing_on_a_scratch_it_refills(models, autoregressive):  # noqa: F811
    """Ten tokens are too few for the calibration's forced steps: ``generate`` measures on a
    scratch prefill of its prompts, refilled whenever its rows finish, before its timing starts,
    so one short call completes it, reports its time apart (``calibration_seconds``: the next
    call of the program pays none), and its own steps are all the controller's, none forced.
    The tokens are the autoregressive ones. A refill's first step is untimed."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, TOKENS, widths=(0, 3))
    run = Run.of(target, drafter, PROMPTS, cfg, 0, None, DEFAULT)
    run.forget_calibration()
    forced, fresh = [], []
    real_decode = Run.decode

    def decode(self, state, max_steps, force=W.AUTO, until_done=None):
        forced.append(force)
        if not np.any(np.asarray(state.stats.steps)):  # a fresh prefill (first, or a refill)
            fresh.append((force, max_steps))
        return real_decode(self, state, max_steps, force, until_done)

    Run.decode = decode
    try:
        first = generate(target, PROMPTS, cfg, drafter)
    finally:
        Run.decode = real_decode
    assert run.calibrated, run.calibration()
    assert first.tokens == [row[:TOKENS] for row in autoregressive]
    # More forced steps than ten tokens take (the scratch was refilled), then the two calls of
    # the generation itself, both the controller's.
    assert sum(f != W.AUTO for f in forced) > TOKENS and forced[-2:] == [W.AUTO, W.AUTO], forced
    # Each refill first takes one untimed step at the widest width (a fresh state's first
    # steps are slower, and a lazy draft reads the prompt then): no estimate includes it.
    refills = [call for call in fresh[1:] if call[0] != W.AUTO]  # (the first scratch aside)
    assert refills and all(call == (1, len(cfg.widths) - 1) for call in refills), fresh
    assert first.metrics.calibration_seconds > 0.0
    again = generate(target, PROMPTS, cfg, drafter)
    assert again.tokens == first.tokens and again.metrics.calibration_seconds == 0.0
    assert run.costs[0] == 1.0 and np.all(run.costs[1:] >= 1.0)
    switch, catch_up = run.switch  # a model draft: its switch booked per width-0 step
    assert switch == 0.0 and catch_up >= 0.0, run.switch
    assert np.all((run.prior > 0.0) & (run.prior < 1.0)), run.prior


def test_acceptance_counts_what_the_drafts_reached_and_costs_pair_their_rounds():
    """The prior counts position i as reached where i - 1 was accepted (and i proposed); the
    costs divide each round's estimate by width 0's of the same round, so a machine that ran
    twice as slow for one round (both widths) leaves the ratio alone."""
    from types import SimpleNamespace

    def stats(accepted, proposed):
        return SimpleNamespace(
            position_accepted=np.asarray(accepted), position_proposed=np.asarray(proposed)
        )

    record = Calibration.empty(2, 3)
    before = stats([[0, 0, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]])
    # Row 0: two steps at width 3 accepting 3 and 1 tokens; row 1: one accepting 0.
    after = stats([[2, 1, 1], [0, 0, 0]], [[2, 2, 2], [1, 1, 1]])
    record.pair.count(before, after)
    np.testing.assert_array_equal(record.pair.accepted, [2, 1, 1])
    np.testing.assert_array_equal(record.pair.reached, [3, 2, 1])
    expected = np.asarray([(2 + 2 * 0.5) / 5, (1 + 2 * 0.35) / 4, (1 + 2 * 0.35) / 3])
    np.testing.assert_allclose(record.pair.prior, expected, rtol=1e-6)
    # Three drafts say little: rows start a standard error above (optimism drafting corrects).
    error = np.sqrt(expected * (1 - expected) / (np.asarray([3, 2, 1]) + 2))
    np.testing.assert_allclose(record.prior, expected + error, rtol=1e-6)
    record.seconds = [[1.0, 2.0, 1.0], [3.0, 6.0, 3.3]]  # round 2 ran twice as slow
    np.testing.assert_allclose(record.costs, [1.0, 3.0], rtol=1e-6)
    record.seconds = [[1.0], [0.9]]  # noise: drafting cheaper than one token is not believed
    assert record.costs is None


def test_costs_rest_on_the_rounds_that_agree():
    """A one-off slow call (a window's first run in a fresh process) is not noise around the
    cost: where the usual rounds disagree by more than AGREE calibration measures more, and
    the costs are the median of the closest ones, not of all."""
    record = Calibration.empty(2, 3)
    record.repeats = 3
    # Round 2's width-6 long call and round 3's width-0 short call each ran a branch first.
    record.seconds = [[16.4, 16.1, 4.1], [22.3, 48.0, 22.5]]
    assert not record.agreed
    np.testing.assert_allclose(record.costs, [1.0, 48.0 / 16.1], rtol=1e-6)  # (what it read)
    record.seconds = [[16.4, 16.1, 4.1, 16.5, 16.2], [22.3, 48.0, 22.5, 23.9, 24.0]]
    assert record.agreed
    want = np.median([22.3 / 16.4, 23.9 / 16.5, 24.0 / 16.2])
    np.testing.assert_allclose(record.costs, [1.0, want], rtol=1e-6)
    record.seconds = [[1.0, 2.0, 1.0], [3.0, 6.0, 3.3]]  # agreeing rounds: their median
    assert record.agreed
    np.testing.assert_allclose(record.costs, [1.0, 3.0], rtol=1e-6)


def test_a_model_drafts_switch_is_booked_per_width0_step_it_missed(models):  # noqa: F811
    """A model draft feeds every token it missed at width 0 when it drafts again: its switch,
    measured after a run of width-0 steps, is booked per step of that run (``catch_up``), so
    the controller prices a probe after a long run as such. A feature draft's few pending
    tokens, and the change of loop, cost the same after any run: a switch of its own."""
    record = Calibration.empty(2, 3)
    record.seconds = [[0.5, 0.5, 0.5], [2.0, 2.0, 2.0]]
    record.switch, record.switch_idle = [1.0, 0.8, 1.2], [40, 50, 60]  # 2 width-0 steps
    assert record.switch_costs(grows=False) == (2.0, 0.0)
    assert record.switch_costs(grows=True) == (0.0, 2.0 / 50)
    draft = ModelDrafter(models[1], num_paths=1, draft_len=3, sampling=GREEDY)
    assert catches_up(draft) and not catches_up(NgramDrafter(8))


def test_a_row_starts_from_the_pairs_prior():
    """A row's estimates start from the policy's prior (a calibrated pair's acceptance) until
    observed: a pair known to draft well drafts from its first step, one known to draft badly
    does not, and an observed position keeps its own estimate."""
    widths, active, hint = (0, 2, 4), jnp.ones((3,), bool), jnp.full((3,), 4, jnp.int32)
    fresh = W.WidthControl.init(3, 4, widths, jax.random.key(0))
    prior = lambda p: W.Policy(jnp.asarray([1.0, 1.2, 1.5]), jnp.int32(W.AUTO), jnp.full((4,), p))
    assert int(W.choose(fresh, prior(0.9), hint, active, widths)[0]) == 2
    assert int(W.choose(fresh, prior(0.1), hint, active, widths)[0]) == 0
    good = {
        **fresh.__dict__,
        "accept": jnp.full((3, 4), 0.9),
        "level": jnp.full((3, 4), 0.9),
        "seen": jnp.ones((3, 4), jnp.int32),
    }
    assert int(W.choose(fresh.__class__(**good), prior(0.1), hint, active, widths)[0]) == 2
    counts = W.prior_from_counts(np.asarray([90, 0]), np.asarray([100, 0]))
    np.testing.assert_allclose(counts, [(90 + 2 * W.PRIOR) / 102, W.PRIOR_LATER], rtol=1e-6)


def test_a_stream_calibrates_before_it_starts(models, autoregressive):  # noqa: F811
    """A stream measures the widths before its first step, as ``generate`` does: it then yields
    one step's tokens per call, the autoregressive ones, and reports the calibration apart."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, TOKENS, widths=(0, 3))
    Run.of(target, drafter, PROMPTS, cfg, 0, None, DEFAULT).forget_calibration()
    stream = Stream(target, PROMPTS, cfg, drafter)
    chunks = list(stream)
    rows = [[t for chunk in chunks for t in chunk[b]] for b in range(len(PROMPTS))]
    assert rows == [row[:TOKENS] for row in autoregressive]
    assert max(len(c[0]) for c in chunks) <= 4, chunks  # one step each (1 + L at most)
    assert len(chunks) == len(stream.widths_taken) == stream.result.metrics.target_forwards
    assert stream.result.metrics.calibration_seconds > 0.0


def test_calibration_measures_its_usual_rounds(models):  # noqa: F811
    """A model drafter and an n-gram drafter both measure their usual rounds (the tiny pair's
    steps are sub-millisecond: :data:`calibration.REPEATS`), more only where the usual ones
    did not agree (:data:`calibration.AGREE`), and then at most ``MORE`` times as many rounds
    (a loaded machine can keep them apart that long; whether they then agree is
    ``test_costs_rest_on_the_rounds_that_agree``'s question). The test holds the
    record it hands the calibration: on a loaded machine noise can make a drafting step look
    cheaper than a one-token step, and the program then forgets its record (measured again
    next call) after measuring the same rounds."""
    target, draft = models
    # 30 tokens, not TOKENS: a long call that the scratch's rows cut short to one step gives
    # no estimate, and ten-token rows cut many (with the other core busy, 13 of 25 calibrations
    # ended with 5 or 6 estimates of 7; 0 of 25 with 30 tokens).
    cfg = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 3))

    def rounds(drafter) -> tuple[int, int]:
        """(estimates per width, the usual rounds) of a fresh calibration."""
        run = Run.of(target, drafter, PROMPTS, cfg, 0, None, DEFAULT)
        run.forget_calibration()
        record = run.calibration(create=True)  # the record calibrate() fills
        generate(target, PROMPTS, cfg, drafter)
        assert record.done, record
        # Kept, or forgotten only because noise won (the costs not believed).
        kept = run.calibration()
        assert kept is record or (kept is None and record.costs is None), (kept, record)
        fast = record.pilot * calibration.STEPS[0] < calibration.SECONDS
        usual = calibration.REPEATS if fast else calibration.SLOW_REPEATS
        assert record.repeats == usual, record
        measured = min(map(len, record.seconds))
        if measured > usual:  # only where the usual rounds disagreed
            first = dataclasses.replace(record, seconds=[t[:usual] for t in record.seconds])
            assert not first.agreed, record
        return measured, usual

    for drafter in (
        ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY),
        NgramDrafter(target.config.vocab_size, num_paths=1, draft_len=3),
    ):
        measured, usual = rounds(drafter)
        assert usual <= measured <= calibration.MORE * usual, (measured, usual)
