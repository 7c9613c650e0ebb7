"""The width controller's estimates (``specjax.decode.widths``): what a row's choice reads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode import widths as W


def test_a_drafter_without_a_free_look_keeps_drafting_through_a_run_of_rejections():
    """A model or feature drafter learns only by drafting, so its choice reads the slow level.
    A row accepting about half its first tokens (a drafting step costing 1.61 one-token steps,
    the SmolLM2 head on the CPU) keeps drafting through five rejections in a row; the fast
    average alone, which a drafter with a free look reads, stops after two. From a level of
    0.9 (a draft copying its target) three rejections are a change of regime: the second takes
    the fast average below the level by more than CHANGE standard deviations, the third
    confirms it, the level follows at once and drafting stops. An acceptance between them
    clears the suspicion (two rejections in a row come once in a hundred verdicts at 0.9: on
    the Shakespeare pair at T = 1 each such false alarm stopped drafting for the rest of the
    generation, as a drafter without a free look relearns only by probing)."""
    active, hint, widths = jnp.ones((1,), bool), jnp.full((1,), 3, jnp.int32), (0, 3)
    verdict = lambda c, tau: W.observe(c, jnp.int32(1), active, jnp.full((1,), tau), hint)

    def choices(level, cost: float, n: int, probe: bool = True, verdicts=None) -> list[int]:
        """The widths chosen after each of ``n`` drafting steps' ``verdicts`` (accepted
        tokens; default: rejections)."""
        control = W.WidthControl.init(1, 3, widths, jax.random.key(0))
        settled = {"accept": jnp.asarray([level]), "level": jnp.asarray([level])}
        control = control.__class__(**{**control.__dict__, **settled, "seen": jnp.full((1, 3), 60)})
        policy = W.Policy(jnp.asarray([1.0, cost]), jnp.int32(W.AUTO))
        out = []
        for tau in verdicts or [0] * n:
            control = verdict(control, tau)
            out.append(int(W.choose(control, policy, hint, active, widths, probe=probe)[0]))
        return out

    half = [0.5, 0.55, 0.6]
    assert choices(half, 1.61, 5) == [1] * 5
    assert choices(half, 1.61, 5, probe=False)[:2] == [1, 0]
    assert 0 in choices(half, 1.61, 12)  # the level sinks too, ~1/32 per rejection
    assert choices([0.9] * 3, 3.0, 3) == [1, 1, 0]
    assert choices([0.9] * 3, 3.0, 4, verdicts=[0, 0, 3, 0]) == [1, 1, 1, 1]
    assert choices([0.9] * 3, 3.0, 5, verdicts=[0, 0, 3, 0, 0]) == [1, 1, 1, 1, 0]


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


def test_a_stop_after_a_change_of_regime_is_checked_by_one_probe():
    """Where a change of regime (three rejections in a row from a level of 0.85) stops the
    drafting, a probe comes ``PROBE`` width-0 steps later whatever its cost (a check): a model
    draft's catch-up grows with every step it misses (``Policy.catch_up``), so probes that wait
    to pay for themselves never come, and a pair whose drafts pay (the Shakespeare pair at
    T = 1: 0.85-0.95 per position) stayed at one-token steps for the rest of a generation after
    a few unlucky verdicts. A check that accepts undoes the stop (the level before the verdicts
    that made it); one that rejects leaves it, and then no probe comes. A stop where the level
    sank a step at a time (here: one rejection, a dearer step) is not checked."""
    active, hint, widths = jnp.ones((1,), bool), jnp.full((1,), 3, jnp.int32), (0, 3)
    prior = jnp.full((3,), 0.85)  # 1 + 2.2 tokens for a step of 2.6: drafting pays

    def policy(cost: float) -> W.Policy:
        return W.Policy(
            jnp.asarray([1.0, cost]), jnp.int32(W.AUTO), prior, jnp.float32(0.0), jnp.float32(0.05)
        )

    cost = 2.6
    choose = lambda c: W.choose(c, policy(cost), hint, active, widths)
    verdict = lambda c, tau: W.observe(c, jnp.int32(1), active, jnp.full((1,), tau), hint)
    control = W.WidthControl.init(1, 3, widths, jax.random.key(0))
    row = {"accept": jnp.full((1, 3), 0.85), "level": jnp.full((1, 3), 0.85)}
    control = control.__class__(**{**control.__dict__, **row, "seen": jnp.full((1, 3), 60)})

    def until_stopped(control):
        for _ in range(10):  # rejections until the controller stops drafting
            index, control = choose(verdict(control, 0))
            if int(index) == 0:
                return control
        raise AssertionError("never stopped")

    def idle(control, steps):
        """The widths of ``steps`` more choices (width-0 steps but for a probe)."""
        taken = []
        for _ in range(steps):
            control = control.__class__(**{**control.__dict__, "last": jnp.int32(0)})
            index, control = choose(control)  # (after a width-0 step, as the program runs)
            taken.append(int(index))
            if taken[-1]:
                return taken, control
        return taken, control

    stopped = until_stopped(control)
    held = np.asarray(stopped.held)
    assert np.all(held > 0.79), held  # the level before the rejection that confirmed the drop
    taken, probing = idle(stopped, 3 * W.PROBE)
    assert taken == [0] * (W.PROBE - 1) + [1], taken
    # Accepted: the stop is undone, and the row drafts again.
    accepted = verdict(probing, 3)
    assert np.all(np.asarray(accepted.level) >= held), (accepted.level, held)
    assert int(choose(accepted)[0]) == 1
    # Rejected: the stop stands, and no probe pays for a catch-up this dear (0.05 per step).
    rejected = verdict(probing, 0)
    index, after = choose(rejected)
    assert int(index) == 0 and np.all(np.asarray(after.held) < 0)
    assert idle(after, 400)[0] == [0] * 400
    # A dearer step: the first rejection stops it, the level a step lower, and nothing checks.
    cost = 3.0
    sank = until_stopped(control)
    assert np.all(np.asarray(sank.held) < 0) and idle(sank, 400)[0] == [0] * 400


def test_a_probe_waits_longer_as_the_draft_falls_behind():
    """A probe waits until :data:`EXPLORE` of its wait pays for its expected loss; where each
    width-0 step adds ``catch_up`` to what the probe costs, each step of waiting earns only
    ``EXPLORE - catch_up`` towards it, and from ``catch_up >= EXPLORE`` on no wait is long
    enough."""
    active, hint, widths = jnp.ones((1,), bool), jnp.full((1,), 3, jnp.int32), (0, 3)
    control = W.WidthControl.init(1, 3, widths, jax.random.key(0))
    row = {"accept": jnp.full((1, 3), 0.3), "level": jnp.full((1, 3), 0.3)}
    control = control.__class__(**{**control.__dict__, **row, "seen": jnp.full((1, 3), 60)})
    gain = 0.3 + 0.3**2 + 0.3**3
    loss = 3.0 + 0.5 - (1.0 + gain)  # a step of 3, a switch of 0.5, 1 + E[accepted] tokens

    def wait(catch_up: float) -> int:
        policy = W.Policy(
            jnp.asarray([1.0, 3.0]),
            jnp.int32(W.AUTO),
            jnp.full((3,), 0.3),
            jnp.float32(0.5),
            jnp.float32(catch_up),
        )
        return int(W.choose(control, policy, hint, active, widths)[1].wait)

    assert wait(0.0) == int(np.ceil(loss / W.EXPLORE))
    assert wait(W.EXPLORE / 2) == int(np.ceil(loss / (W.EXPLORE / 2)))
    assert wait(W.EXPLORE) >= 10**6
