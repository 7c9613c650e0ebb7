"""The width controller's estimates (``specjax.decode.widths``): what a row's choice reads."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.decode import widths as W


def test_a_drafter_without_a_free_look_keeps_drafting_through_a_run_of_rejections():
    """A model or feature drafter learns only by drafting, so its choice reads the slow level.
    A row accepting about half its first tokens (a drafting step costing 1.61 one-token steps,
    the SmolLM2 head on the CPU) keeps drafting through five rejections in a row; the fast
    average alone, which a drafter with a free look reads, stops after two. From a level of
    0.9 (a draft copying its target) two rejections are a change of regime: the level follows
    the fast average at once and drafting stops."""
    active, hint, widths = jnp.ones((1,), bool), jnp.full((1,), 3, jnp.int32), (0, 3)
    rejected = lambda c: W.observe(c, jnp.int32(1), active, jnp.zeros((1,), jnp.int32), hint)

    def choices(level, cost: float, n: int, probe: bool = True) -> list[int]:
        control = W.WidthControl.init(1, 3, widths, jax.random.key(0))
        settled = {"accept": jnp.asarray([level]), "level": jnp.asarray([level])}
        control = control.__class__(**{**control.__dict__, **settled, "seen": jnp.full((1, 3), 60)})
        policy = W.Policy(jnp.asarray([1.0, cost]), jnp.int32(W.AUTO))
        out = []
        for _ in range(n):
            control = rejected(control)
            out.append(int(W.choose(control, policy, hint, active, widths, probe=probe)[0]))
        return out

    half = [0.5, 0.55, 0.6]
    assert choices(half, 1.61, 5) == [1] * 5
    assert choices(half, 1.61, 5, probe=False)[:2] == [1, 0]
    assert 0 in choices(half, 1.61, 12)  # the level sinks too, ~1/32 per rejection
    assert choices([0.9] * 3, 3.0, 2) == [1, 0]


def test_a_row_below_the_pairs_prior_is_lifted_by_what_its_few_observations_leave_open(
    monkeypatch,
):
    """Rows of a pair differ, and a drafter without a free look learns about one only by
    drafting. With the lift on (``BONUS`` 1; off as shipped), a row whose level a few early
    rejections pulled to 0.35 (the SmolLM2 head's pair at 0.50 / 0.47 / 0.45, a drafting step
    costing 1.65) still drafts: its choice lifts the level by a standard error of its few
    observations, never above the prior. After hundreds of observations the same level stops
    it, and below a pair that is itself at 0.3 nothing is lifted."""
    active, hint, widths = jnp.ones((1,), bool), jnp.full((1,), 3, jnp.int32), (0, 3)

    def choice(level: float, seen: list[int], prior: list[float]) -> int:
        control = W.WidthControl.init(1, 3, widths, jax.random.key(0))
        row = {"accept": jnp.full((1, 3), level), "level": jnp.full((1, 3), level)}
        control = control.__class__(
            **{**control.__dict__, **row, "seen": jnp.asarray([seen], jnp.int32)}
        )
        policy = W.Policy(jnp.asarray([1.0, 1.65]), jnp.int32(W.AUTO), jnp.asarray(prior))
        return int(W.choose(control, policy, hint, active, widths)[0])

    pair = [0.50, 0.47, 0.45]
    assert W.BONUS == 0.0 and choice(0.35, [4, 2, 1], pair) == 0  # as shipped: no lift
    monkeypatch.setattr(W, "BONUS", 1.0)
    assert choice(0.35, [4, 2, 1], pair) == 1  # lifted to about the pair: drafts
    assert choice(0.35, [200, 100, 50], pair) == 0  # its own verdicts say no
    assert choice(0.35, [4, 2, 1], [0.3, 0.3, 0.3]) == 0  # never above the prior
    assert choice(0.6, [4, 2, 1], pair) == 1  # above the prior: its own level


def test_after_a_one_token_step_drafting_must_also_pay_the_switch():
    """For a drafter without a free look, a drafting step right after a width-0 step also pays
    the draft's catch-up (``Policy.switch``, in width-0 steps). A row whose drafts pay for their
    step but not for a switch keeps drafting while it drafts and keeps its one-token steps
    while it takes them, instead of alternating and paying the switch every other step (the
    Shakespeare pair's switch is about 2.4 one-token steps)."""
    active, hint, widths = jnp.ones((1,), bool), jnp.full((1,), 4, jnp.int32), (0, 4)
    costs, prior = jnp.asarray([1.0, 3.6]), jnp.full((4,), 0.88)  # 3.9 tokens for 3.6

    def choice(last: int, switch: float) -> int:
        control = W.WidthControl.init(1, 4, widths, jax.random.key(0))
        row = {"accept": jnp.full((1, 4), 0.88), "level": jnp.full((1, 4), 0.88)}
        seen = jnp.full((1, 4), 50, jnp.int32)
        last_ = jnp.int32(last)
        control = control.__class__(**{**control.__dict__, **row, "seen": seen, "last": last_})
        policy = W.Policy(costs, jnp.int32(W.AUTO), prior, jnp.float32(switch))
        return int(W.choose(control, policy, hint, active, widths)[0])

    assert choice(last=1, switch=2.4) == 1  # drafting: its step pays, it goes on
    assert choice(last=0, switch=2.4) == 0  # idle: step and switch do not pay
    assert choice(last=0, switch=0.0) == 1  # no catch-up to pay: drafts
    assert choice(last=-1, switch=2.4) == 1  # a row's first step pays no switch
