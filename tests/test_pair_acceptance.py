"""The pair's acceptance (``specjax.decode.acceptance``): pooled over the programs of one target and
draft, grown by every generation of a drafter without a free look, and fixed per program once
it is known."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import numpy as np
import pytest

from specjax import sampling
from specjax.decode import DecodeConfig, acceptance, generate, widths
from specjax.decode.batching import ContinuousBatch, Request
from specjax.decode.buckets import DEFAULT
from specjax.decode.seams import PROGRAMS, Run
from specjax.drafters import ModelDrafter, NgramDrafter
from tests.test_widths import (  # noqa: F401 (fixtures)
    GREEDY,
    NEW_TOKENS,
    PROMPTS,
    autoregressive,
    models,
)

# Slow tier: four generations' worth of calibration per test, for the process-wide pooling that
# the WidthPolicy rewrite removes (TODO(width-policy), issue 58).
pytestmark = pytest.mark.slow


def _calibrated(target, drafter, prompts, cfg) -> Run:
    """The run of ``prompts`` once its program is calibrated (measured afresh)."""
    run = Run.of(target, drafter, prompts, cfg, 0, None, DEFAULT)
    run.forget_calibration()
    for _ in range(60):
        generate(target, prompts, cfg, drafter)
        if run.calibrated:
            return run
    raise AssertionError("calibration did not finish in 60 generations")


def test_programs_of_one_pair_pool_their_acceptance_and_generations_add_to_it(
    models,  # noqa: F811
    autoregressive,  # noqa: F811
    monkeypatch,
):
    """Acceptance belongs to the pair, not to a program's shapes: a second program (another
    batch bucket) counts into the same record the first one's generations filled, and starts
    from it. Each later generation adds its drafting steps, and a calibrated program follows
    the counts while they are few (a standard error optimistic). Another draft of the same
    shapes has its own record. An n-gram drafter (steered by its free look, not the prior)
    counts nothing, neither calibration's forced steps nor its generations', and starts every
    generation from the default prior."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 3))
    PROGRAMS.pairs.clear()
    monkeypatch.setattr(acceptance, "SETTLE", 10**9)  # never known here
    first = _calibrated(target, drafter, PROMPTS, cfg)
    pair = first.calibration().pair
    assert pair.reached[0] > 0, pair  # calibration's forced drafts, counted after the call
    # Drafting made to look cheap: the next generation drafts, and its steps are counted.
    first.calibration().seconds = [[1.0], [1.0001]]
    before, prior = pair.reached.copy(), first.prior.copy()
    out = generate(target, PROMPTS, cfg, drafter)
    assert out.tokens == autoregressive
    assert out.metrics.width_steps[3] > 0, out.metrics.width_steps
    assert np.all(pair.reached >= before) and pair.reached[0] > before[0], (before, pair)
    assert not np.array_equal(first.prior, prior)  # not known yet: it follows the counts
    np.testing.assert_array_equal(first.prior, pair.upper)  # (optimistic while unknown)

    second = _calibrated(target, drafter, PROMPTS[:1], cfg)  # batch 1: another program
    assert second.key != first.key and second.calibration().pair is pair
    assert pair.reached[0] > before[0]

    other = jax.tree.map(lambda x: x + 0.0, draft)  # the same shapes, other weights
    another = ModelDrafter(other, num_paths=1, draft_len=3, sampling=GREEDY)
    assert acceptance.of_pair((target, another), cfg, 3) is not pair
    assert acceptance.of_pair(first.args[:2], cfg, 3) is pair

    ngram = NgramDrafter(target.config.vocab_size, num_paths=1, draft_len=3)
    run = _calibrated(target, ngram, PROMPTS, cfg)
    # Its free look sees each first verdict anyway, and what it copies is the prompt's: the
    # forced drafting steps of calibration (on whichever prompt came first) set no prior.
    assert run.calibration().pair is not acceptance.of_pair(run.args[:2], cfg, 3)
    assert run.pending is None and run.calibration().pair.reached.sum() == 0
    np.testing.assert_array_equal(run.prior, widths.default_prior(3))
    step = np.ones((len(PROMPTS), 3), np.int32)
    run.learn(SimpleNamespace(position_accepted=step, position_proposed=step))
    assert run.calibration().pair.reached.sum() == 0
    np.testing.assert_array_equal(run.prior, widths.default_prior(3))


def test_a_program_fixes_its_prior_once_the_pairs_acceptance_is_known(models):  # noqa: F811
    """Once the pair's first position has been observed SETTLE times, a calibrated program fixes
    its prior: later generations still add to the counts, but at T = 1 one seed then gives one
    sample and the same widths, call after call, even once the counts have come to say that
    the drafts are never accepted."""
    target, draft = models
    params = sampling.SamplingParams(1.0)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=params)
    cfg = DecodeConfig("block", params, NEW_TOKENS, widths=(0, 3))
    run = _calibrated(target, drafter, PROMPTS, cfg)
    record = run.calibration()
    record.seconds = [[1.0], [1.0001]]  # drafting looks cheap: the rows draft
    reached = np.asarray([acceptance.SETTLE, acceptance.SETTLE // 2, acceptance.SETTLE // 4])
    record.pair.accepted, record.pair.reached = reached // 2, reached  # known: half accepted
    first = generate(target, PROMPTS, cfg, drafter, seed=5)
    assert first.metrics.width_steps[3] > 0, first.metrics.width_steps
    assert record.settled is not None
    record.pair.reached = record.pair.reached + 10**6  # as if a million drafts had all failed
    again = generate(target, PROMPTS, cfg, drafter, seed=5)
    assert again.tokens == first.tokens
    assert again.metrics.width_steps == first.metrics.width_steps


def test_calibrations_verdicts_count_only_once_the_generation_has_ended(models):  # noqa: F811
    """The forced drafting steps of a scratch calibration decode the generation's own prompts:
    at T = 0 their verdicts reach the pair's counts after that generation, not before (its
    controller would otherwise start from its own verdicts); at T = 1 the scratch draws with a
    seed of its own and they count at once."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 3))
    PROGRAMS.pairs.clear()
    run = Run.of(target, drafter, PROMPTS, cfg, 0, None, DEFAULT)
    run.forget_calibration()
    run.prepare()
    pair = run.calibration().pair
    assert run.pending.reached[0] > 0 and pair.reached[0] == 0, (run.pending, pair)
    held = run.pending.reached.copy()
    step = np.zeros((len(PROMPTS), 3), np.int32)  # a generation that drafted nothing
    run.learn(SimpleNamespace(position_accepted=step, position_proposed=step))
    np.testing.assert_array_equal(pair.reached, held)
    assert run.pending is None

    # At T = 1 the scratch draws with a seed of its own (the first tokens differ from the
    # generation's), so its verdicts are no verdicts of the generation: they count at once.
    params = sampling.SamplingParams(1.0)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=params)
    cfg = DecodeConfig("block", params, NEW_TOKENS, widths=(0, 3))
    run = Run.of(target, drafter, PROMPTS, cfg, 0, None, DEFAULT)
    run.forget_calibration()
    run.prepare()
    pair = run.calibration().pair
    assert run.pending is None and pair.reached[0] > 0, pair
    # A refilled scratch (calibration's second, third, ...) draws anew too: its steps are new
    # verdicts, not replays of the first scratch's.
    states = [run.decode(run.start(scratch=n), 1) for n in (0, 1, 2)]
    rows = np.arange(len(PROMPTS))
    firsts = [np.asarray(s.tokens)[rows, np.asarray(s.lengths) - 1] for s in states]
    assert not np.array_equal(firsts[0], firsts[1]), firsts
    assert not np.array_equal(firsts[1], firsts[2]), firsts


def test_a_batch_job_counts_each_rows_drafting_steps_once(models):  # noqa: F811
    """Continuous batching calibrates on its live slots, and each finished row adds its drafting
    steps to the pair's counts: calibration's forced steps on a row are among them, counted
    once (the counts equal the positions the job's rows proposed)."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=GREEDY)
    cfg = DecodeConfig("block", GREEDY, NEW_TOKENS, widths=(0, 3))
    PROGRAMS.pairs.clear()
    PROGRAMS.calibrations.clear()
    engine = ContinuousBatch(target, drafter, cfg, slots=2)
    done = list(engine.run([Request(i, p) for i, p in enumerate(PROMPTS)]))
    assert len(done) == len(PROMPTS)
    ((pair, _),) = PROGRAMS.pairs.values()
    proposed = engine.metrics.position_proposed
    assert proposed[0] > 0 and pair.reached[0] == proposed[0], (pair, proposed)
    assert pair.accepted[0] == engine.metrics.position_accepted[0]
