"""A generation the width controller would never draft runs as the autoregressive one
(``adaptive.never_drafts``, ``Run.plain``): the decision agrees with the adaptive decode program,
and the tokens, streamed or not, are the adaptive program's at T = 1."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from specjax import sampling
from specjax.decode import DecodeConfig, Stream, generate
from specjax.decode import widths as W
from specjax.decode.adaptive import never_drafts
from specjax.decode.seams import decode_program
from specjax.drafters import ModelDrafter
from specjax.testing import pair
from tests.test_widths import PROMPTS, initial_state

NEW = 30
WIDTHS = (0, 1, 3)
SAMPLED = sampling.SamplingParams(1.0)


@pytest.fixture(scope="module")
def models():
    return pair(sigma=0.05)


def _policy(costs, prior=(0.6, 0.5, 0.5), switch=0.0, catch_up=0.0) -> W.Policy:
    f32 = lambda x: np.asarray(x, np.float32)
    return W.Policy(f32(costs), np.int32(W.AUTO), f32(prior), f32(switch), f32(catch_up))


POLICIES = [
    _policy((1.0, 1.2, 1.5)),  # drafting pays from the start
    _policy((1.0, 9.0, 9.0)),  # no draft could pay: no probe either
    _policy((1.0, 1.75, 3.0), catch_up=0.02),  # a probe loses more with every step it waits
    _policy((1.0, 1.75, 3.0)),  # a probe pays for itself after 15 steps: it comes
    _policy((1.0, 1.95, 3.0)),  # after 35: not within 30 steps
    _policy((1.0, 1.3, 2.2), prior=(0.2, 0.2, 0.2), switch=0.05),  # low prior: a probe at 15
]


def test_never_drafts_agrees_with_the_decode_program(models):
    """For each policy, the adaptive decode program (every row from the prior, as a calibrated
    generation starts) takes a drafting width within NEW steps exactly where ``never_drafts``
    says it would not; both answers occur."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=SAMPLED)
    cfg = DecodeConfig("block", SAMPLED, NEW, widths=WIDTHS)
    program = jax.jit(decode_program, static_argnames=("config",))
    answers = []
    for policy in POLICIES:
        start = initial_state(target, drafter, cfg, PROMPTS)
        state, _ = program(target, drafter, start, NEW, None, policy, config=cfg)
        drafted = int(np.sum(np.asarray(state.control.steps)[1:]))
        never = never_drafts(drafter, policy, WIDTHS, NEW)
        assert never == (drafted == 0), (policy.costs, drafted)
        answers.append(never)
    assert answers == [False, True, True, False, True, False]


def test_a_generation_that_never_drafts_is_the_autoregressive_one(models):
    """Costs under which no draft could pay: ``generate`` and ``Stream`` run the autoregressive
    programs, draw at T = 1 the tokens the adaptive program's width-0 steps draw (the same keys)
    and report every step at width 0."""
    target, draft = models
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=SAMPLED)
    cfg = DecodeConfig("block", SAMPLED, NEW, widths=WIDTHS, width_costs=(1.0, 9.0, 9.0))
    out = generate(target, PROMPTS, cfg, drafter, seed=5)
    baseline = generate(target, PROMPTS, DecodeConfig("autoregressive", SAMPLED, NEW), seed=5)
    assert out.tokens == baseline.tokens
    program = jax.jit(decode_program, static_argnames=("config",))
    start = initial_state(target, drafter, cfg, PROMPTS, seed=5)
    adaptive, _ = program(target, drafter, start, NEW, None, _policy(cfg.width_costs), config=cfg)
    assert [
        np.asarray(adaptive.tokens)[b, len(p) : len(p) + NEW].tolist()
        for b, p in enumerate(PROMPTS)
    ] == out.tokens
    assert out.metrics.width_steps == {0: NEW, 1: 0, 3: 0}
    assert out.metrics.accepted_length_histogram == [NEW * len(PROMPTS), 0, 0, 0]
    assert out.metrics.position_proposed == [0, 0, 0]
    stream = Stream(target, PROMPTS, cfg, drafter, seed=5)
    streamed = [[] for _ in PROMPTS]
    for new in stream:
        for row, ids in zip(streamed, new, strict=True):
            row.extend(ids)
    assert streamed == out.tokens and stream.widths_taken == [0] * NEW
    assert stream.result.metrics.width_steps == out.metrics.width_steps
