"""The width controller's costs (``Run.calibrate``): measured only where they steer
something, kept across calls of a program when one generation is too short to measure them all.
"""

from __future__ import annotations

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
from tests.test_widths import (  # noqa: F401 (fixtures)
    GREEDY,
    NEW_TOKENS,
    PROMPTS,
    autoregressive,
    models,
)


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


def test_a_short_generation_keeps_its_calibration_for_the_next_call(models, autoregressive):  # noqa: F811
    """Ten tokens are too few for every calibration estimate: each call keeps what it measured
    for the program (the controller meanwhile uses those medians), and a later call of the
    same program completes it. The tokens are the autoregressive ones throughout."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, 10, widths=(0, 3))
    run = Run.of(target, drafter, PROMPTS, cfg, 0, None, DEFAULT)
    run.forget_calibration()
    partial = []
    for _ in range(40):
        out = generate(target, PROMPTS, cfg, drafter)
        assert out.tokens == [row[:10] for row in autoregressive]
        if run.calibrated:
            break
        partial.append(run.calibration().seconds)
    assert run.calibrated and partial and any(partial), partial
    assert run.costs[0] == 1.0 and np.all(run.costs[1:] >= 1.0)
    assert run.switch >= 0.0 and np.all((run.prior > 0.0) & (run.prior < 1.0)), run.prior


def test_calibration_counts_what_the_forced_drafts_reached_and_pairs_its_rounds():
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


def test_a_stream_shows_the_calibrations_tokens_as_they_come(models, autoregressive):  # noqa: F811
    """Calibration runs dozens of forced steps per call; a stream yields each call's tokens as
    it returns (``Run.calibration_calls``) instead of one burst at its end, and they are the
    autoregressive tokens."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 3))
    Run.of(target, drafter, PROMPTS, cfg, 0, None, DEFAULT).forget_calibration()
    chunks = list(Stream(target, PROMPTS, cfg, drafter))
    rows = [[t for chunk in chunks for t in chunk[b]] for b in range(len(PROMPTS))]
    assert rows == autoregressive
    assert len(chunks) >= 4 and max(len(c[0]) for c in chunks) < NEW_TOKENS, chunks


def test_a_choice_is_clear_once_the_acceptance_and_cost_errors_cannot_change_it():
    """Calibration ends its usual rounds only when the pair's first width is the same whichever
    way its acceptance estimates err by a standard error, and its costs by theirs. Eight
    drafting steps of the SmolLM2 head (3 of 8 first tokens accepted) leave the choice open at a
    1.6x drafting step. A hundred times as many with the same rates settle the acceptance, but
    at 1.6x the choice then turns on a few percent of cost, within one round's noise; three
    rounds at 1.8x settle it, as do clearly good or bad drafts after one."""
    widths = (0, 3)

    def record(accepted, reached, seconds=((1.0,), (1.6,))):
        r = Calibration.empty(2, 3)
        r.seconds = [list(s) for s in seconds]
        r.pair.accepted, r.pair.reached = np.asarray(accepted), np.asarray(reached)
        return r

    many = [300, 200, 0], [800, 300, 200]
    assert not record([3, 2, 0], [8, 3, 2]).clear(widths)
    assert not record(*many).clear(widths)  # the cost's error decides
    assert record(*many, seconds=((1.0,) * 3, (1.8,) * 3)).clear(widths)  # width 0
    assert record([90, 80, 70], [100, 90, 80]).clear(widths)  # drafts pay
    assert record([2, 0, 0], [100, 2, 0]).clear(widths)  # they do not
    assert not record([90, 80, 70], [100, 90, 80], seconds=((1.0,), ())).clear(widths)  # no cost
    one = record(*many)
    assert one.cost_error() == calibration.COST_NOISE  # one round: the floor
    spread = record(*many, seconds=((1.0,) * 4, (1.4, 1.6, 1.6, 1.8)))
    np.testing.assert_allclose(spread.cost_error(), np.std([1.4, 1.6, 1.6, 1.8], ddof=1) / 1.6 / 2)


def test_an_open_choice_measures_longer_for_a_drafter_without_a_free_look(models, monkeypatch):  # noqa: F811
    """While the choice is open a model drafter's calibration runs up to MORE times its usual
    rounds (its rows start from the prior); an n-gram drafter, steered by its free look at each
    proposal, stops at the usual rounds."""
    target, draft = models
    cfg = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 3))

    def rounds(drafter) -> tuple[int, int]:
        """(estimates per width at the end, the usual rounds) of a fresh calibration."""
        run = Run.of(target, drafter, PROMPTS, cfg, 0, None, DEFAULT)
        run.forget_calibration()
        for _ in range(60):
            generate(target, PROMPTS, cfg, drafter)
            if run.calibrated:
                break
        record = run.calibration()
        fast = record.pilot * calibration.STEPS[0] < calibration.SECONDS
        return min(map(len, record.seconds)), calibration.REPEATS if fast else 1

    monkeypatch.setattr(Calibration, "clear", lambda self, widths: False)
    measured, usual = rounds(ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY))
    assert usual < measured <= calibration.MORE * usual, (measured, usual)
    measured, usual = rounds(NgramDrafter(target.config.vocab_size, num_paths=1, draft_len=3))
    assert measured == usual, (measured, usual)
