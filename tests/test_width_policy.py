"""The width policies (:mod:`specjax.decode.widths`) on hand-made estimates and costs, without a
model: :class:`Goodput`'s choice (expected goodput, margin, forcing, a hint of 0), its probes and
their doubling waits (and ``quota``, the width-0 steps before the next choice), the free-look
``reveal`` rule and its moving average of verdicts; :class:`RandomWidths`, :class:`Fixed` and
``policy_of``."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decode import DecodeConfig
from specjax.decode import widths as W

INT_MAX = int(np.iinfo(np.int32).max)


def inputs(costs, force: int = W.AUTO) -> W.WidthInputs:
    return W.WidthInputs(jnp.asarray(costs, jnp.float32), jnp.int32(force))


def control_with(batch: int, draft_len: int, widths, accept=None, **fields) -> W.WidthControl:
    """A fresh controller with ``accept`` (a float for every position, or ``[B, L]``)."""
    control = W.init_control(batch, draft_len, widths, jax.random.key(0))
    if accept is not None:
        fields["accept"] = jnp.broadcast_to(jnp.asarray(accept, jnp.float32), (batch, draft_len))
    return dataclasses.replace(control, **fields)


def rows(n: int, value=True, dtype=bool):
    return jnp.full((n,), value, dtype)


def test_a_fresh_controller_starts_from_the_default_prior_with_no_step_taken():
    control = W.init_control(3, 4, (0, 2, 4), jax.random.key(1))
    np.testing.assert_allclose(control.accept[:, 0], W.PRIOR)
    np.testing.assert_allclose(control.accept[:, 1:], W.PRIOR_LATER)
    assert control.accept.shape == control.seen.shape == (3, 4) and not np.any(control.seen)
    assert np.asarray(control.steps).tolist() == [0, 0, 0]
    assert (int(control.idle), int(control.wait), int(control.last), int(control.next)) == (
        0,
        0,
        -1,
        -1,
    )
    assert np.asarray(control.first).tolist() == [-1, -1, -1] and control.widths == (0, 2, 4)


def test_expected_accepted_sums_the_chance_of_reaching_each_position_up_to_the_hint():
    accept = jnp.asarray([[0.5, 0.5, 0.5, 0.5], [0.9, 0.0, 0.9, 0.9]])
    got = np.asarray(W.expected_accepted(accept, jnp.asarray([4, 4]), (0, 1, 2, 4)))
    np.testing.assert_allclose(got[0], [0.0, 0.5, 0.75, 0.9375])
    np.testing.assert_allclose(got[1], [0.0, 0.9, 0.9, 0.9])  # nothing past a sure rejection
    capped = np.asarray(W.expected_accepted(accept, jnp.asarray([1, 0]), (0, 1, 2, 4)))
    np.testing.assert_allclose(capped, [[0.0, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 0.0]])


def test_best_width_weighs_expected_tokens_against_costs_over_active_rows():
    widths, hint = (0, 2, 4), jnp.full((2,), 4, jnp.int32)
    costs = jnp.asarray([1.0, 1.15, 1.5])

    def best(p, margin=1.05, c=costs):
        return int(W.best_width(jnp.full((2, 4), p), c, hint, rows(2), widths, margin))

    assert best(0.9) == 2  # (1 + 3.10) / 1.5 beats (1 + 1.71) / 1.15 and 1
    assert best(0.1) == 0  # drafts do not pay: one-token steps
    # Row 1 accepts everything but is done: only row 0's estimates count.
    mixed = jnp.asarray([[0.1] * 4, [1.0] * 4])
    assert int(W.best_width(mixed, costs, hint, jnp.asarray([True, False]), widths, 1.05)) == 0
    assert int(W.best_width(mixed, costs, hint, rows(2), widths, 1.05)) == 2
    # The margin: 1 + 0.17 + 0.17^2 = 1.199 tokens for a cost of 1.15 beats width 0 only
    # without it (1.15 x 1.05 = 1.2075).
    assert best(0.17, c=jnp.asarray([1.0, 1.15, 9.0]), margin=1.0) == 1
    assert best(0.17, c=jnp.asarray([1.0, 1.15, 9.0]), margin=1.05) == 0
    # Ties go to the smaller width.
    assert best(0.0, c=jnp.asarray([1.0, 1.0, 1.0]), margin=1.0) == 0


def test_could_pay_asks_whether_a_fully_accepted_draft_beats_width_zero_by_the_margin():
    widths = (0, 2, 4)
    hopeless = jnp.asarray([1.0, 2.9, 4.8])  # 3 and 5 tokens for 2.9 and 4.8 (x 1.05)
    assert not bool(W.could_pay(hopeless, widths, 1.05))
    assert bool(W.could_pay(hopeless, widths, 1.0))
    assert bool(W.could_pay(jnp.asarray([1.0, 1.15, 1.5]), widths, 1.05))
    assert not bool(W.could_pay(jnp.asarray([1.0, 3.0]), (0, 2), 1.0))  # a tie does not pay


def test_goodput_drafts_where_drafts_pay_and_never_with_a_hint_of_zero():
    widths, policy = (0, 2, 4), W.Goodput()
    costs, active = inputs([1.0, 1.15, 1.5]), rows(3)
    hint = jnp.full((3,), 4, jnp.int32)
    good = control_with(3, 4, widths, 0.9, wait=jnp.int32(8))  # (no probe due: 8 to wait)
    bad = control_with(3, 4, widths, 0.1, wait=jnp.int32(8))
    assert int(policy.choose(good, costs, hint, active, False)[0]) == 2
    assert int(policy.choose(bad, costs, hint, active, False)[0]) == 0
    # An n-gram drafter without a match proposes nothing: no draft, and no probe either (one
    # is due here: 8 width-0 steps taken, a wait of 8).
    nothing = jnp.zeros((3,), jnp.int32)
    due = dataclasses.replace(bad, idle=jnp.int32(8))
    assert int(policy.choose(due, costs, hint, active, False)[0]) == 1  # (the probe)
    for control in (good, due, dataclasses.replace(good, idle=jnp.int32(100))):
        for look in (False, True):
            assert int(policy.choose(control, costs, nothing, active, look)[0]) == 0
    # A row weighs only what its match can propose: (1 + 3.10) / 2.2 pays, 1.9 / 2.0 does not.
    dear = inputs([1.0, 2.0, 2.2])
    for most, want in [(4, 2), (2, 1), (1, 0)]:
        hints = jnp.full((3,), most, jnp.int32)
        assert int(policy.choose(good, dear, hints, active, False)[0]) == want, most


def test_drafting_starts_past_the_margin_and_goes_on_while_it_beats_width_zero_times_keep():
    """A hysteresis: after a width-0 step a drafting width must beat width 0 by ``margin``;
    after a drafting step it goes on while it beats width 0 times ``keep``."""
    policy, widths = W.Goodput(margin=1.05, keep=0.9), (0, 3)
    hint, active = jnp.full((1,), 3, jnp.int32), rows(1)
    tokens = 1 + 0.5 + 0.25 + 0.125  # a drafting step's expected tokens at estimates 0.5
    after = {
        last: control_with(1, 3, widths, 0.5, last=jnp.int32(last), wait=jnp.int32(8))
        for last in (-1, 0, 1)  # before any step, after width 0, after drafting
    }
    for ratio, want in [(1.1, (1, 1, 1)), (1.0, (0, 0, 1)), (0.95, (0, 0, 1)), (0.85, (0, 0, 0))]:
        costs = inputs([1.0, tokens / ratio])  # drafting's goodput over width 0's: ratio
        got = tuple(int(policy.choose(after[k], costs, hint, active, False)[0]) for k in after)
        assert got == want, ratio


def test_a_forced_width_is_taken_whatever_the_estimates_and_leaves_the_waits_alone():
    widths, hint, active = (0, 2, 4), jnp.full((2,), 4, jnp.int32), rows(2)
    bad = control_with(2, 4, widths, 0.1, wait=jnp.int32(16), idle=jnp.int32(16))
    good = control_with(2, 4, widths, 0.9, wait=jnp.int32(16))
    for policy in (W.Goodput(), W.RandomWidths(), W.Fixed(), W.Fixed(0)):
        for force in (0, 1, 2):
            for control in (bad, good):
                index, after = policy.choose(
                    control, inputs([1.0, 1.2, 1.5], force), hint, active, False
                )
                assert int(index) == force, (policy, force)
                assert int(after.wait) == 16
            # Forced width 0 runs on for good: nothing to choose until the call ends.
            assert int(policy.quota(bad, inputs([1.0, 1.2, 1.5], force))) == INT_MAX


def test_probes_wait_first_probe_then_probe_and_double_up_to_probe_max():
    """Estimates that never pay: width 0, with a probe at ``widths[1]`` after ``first_probe``
    width-0 steps, then after ``probe``, ``2 probe``, ... width-0 steps, at most ``probe_max``;
    before each choice ``quota`` is the width-0 steps left before the probe. Estimates that
    choose drafting bring the wait back to ``probe``."""
    policy = W.Goodput(first_probe=2, probe=4, probe_max=16, priced=False)
    widths, costs, active = (0, 1, 3), inputs([1.0, 1.3, 9.0]), rows(2)
    hint = jnp.full((2,), 3, jnp.int32)
    control = control_with(2, 3, widths, 0.05)

    def run(control, steps: int):
        """``(widths taken, the quota after each width-0 choice, control)`` over ``steps``
        steps, each observed as rejected."""
        taken, quotas = [], []
        for _ in range(steps):
            index, control = policy.choose(control, costs, hint, active, False)
            width = widths[int(index)]
            taken.append(width)
            if width == 0:
                quotas.append(int(policy.quota(control, costs)))
            proposed = jnp.full((2,), width, jnp.int32)
            control = policy.observe(
                control, index, active, jnp.zeros((2,), jnp.int32), proposed, None
            )
        return taken, quotas, control

    taken, quotas, control = run(control, 2 + 1 + 4 + 1 + 8 + 1 + 16 + 1 + 16 + 1)
    waits = [2, 4, 8, 16, 16]
    assert taken == [w for wait in waits for w in [0] * wait + [1]], taken
    # quota: the width-0 steps from each choice to the probe (the program runs them as one run).
    assert quotas == [n for wait in waits for n in range(wait, 0, -1)], quotas
    assert np.asarray(control.steps).tolist() == [sum(waits), len(waits), 0]
    # Estimates that choose drafting: the wait is back to `probe`, and once they no longer do,
    # the next probe comes after `probe` width-0 steps.
    drafting = dataclasses.replace(control, accept=jnp.full((2, 3), 0.9))
    index, drafting = policy.choose(drafting, costs, hint, active, False)
    assert int(index) > 0 and int(drafting.wait) == 4
    idle = dataclasses.replace(drafting, accept=control.accept, idle=jnp.int32(0))
    assert run(idle, 5)[0] == [0, 0, 0, 0, 1]


def test_a_probe_waits_longer_the_dearer_it_is_against_what_it_could_gain():
    """``priced``: the wait after drafting stops is ``probe`` times a probe's extra cost
    ``c_1 - 1`` over what a fully accepted probe gains over width 0, ``(1 + w_1) / (c_1 margin)
    - 1``, within 1 .. ``probe_max``: SmolLM2's head on the CPU probes every few steps, the
    Shakespeare pair's draft (a step ~4 one-token steps, a lazy draft catching up) seldom."""
    hint, active = jnp.full((1,), 4, jnp.int32), rows(1)
    cases = [  # (widths, costs, priced wait)
        ((0, 3), [1.0, 1.6], 4),  # ceil(8 * 0.6 / (4 / 1.68 - 1)) = ceil(3.48)
        ((0, 4), [1.0, 3.0], 28),  # ceil(8 * 2 / (5 / 3.15 - 1)) = ceil(27.2)
        ((0, 4), [1.0, 4.09], 128),  # ceil(150.4), at most probe_max
    ]
    for widths, costs, want in cases:
        drafting = control_with(1, widths[-1], widths, 0.99)  # (drafting pays: the wait resets)
        for policy, wait in [(W.Goodput(), want), (W.Goodput(priced=False), 8)]:
            index, after = policy.choose(drafting, inputs(costs), hint, active, False)
            assert int(index) == 1 and int(after.wait) == wait, (costs, policy.priced)


def test_the_default_goodput_drafts_at_its_first_step_and_never_probes_where_no_draft_could_pay():
    widths, active, hint = (0, 2, 4), rows(2), jnp.full((2,), 4, jnp.int32)
    fresh = control_with(2, 4, widths, 0.0)  # (estimates that never choose drafting)
    policy = W.Goodput()
    index, after = policy.choose(fresh, inputs([1.0, 1.2, 1.5]), hint, active, False)
    assert int(index) == 1  # first_probe 0: a probe at once
    assert int(after.wait) == 2  # ceil(8 * 0.2 / (3 / (1.2 * 1.05) - 1)): priced
    hopeless = inputs([1.0, 2.9, 4.8])
    control = fresh
    for _ in range(2 * policy.probe_max):
        index, control = policy.choose(control, hopeless, hint, active, False)
        assert int(index) == 0
        assert int(policy.quota(control, hopeless)) == INT_MAX  # one run to the end
        control = policy.observe(
            control, index, active, jnp.zeros(2, jnp.int32), jnp.zeros(2, jnp.int32), None
        )
    assert int(control.idle) == 2 * policy.probe_max
    # A policy whose widths start above 0 has no width-0 step to probe from.
    above = control_with(2, 4, (2, 4), 0.0, idle=jnp.int32(1000))
    assert int(policy.choose(above, inputs([1.0, 1.2]), hint, active, False)[0]) == 0


def test_a_free_look_probes_only_a_proposal_whose_first_token_holds():
    """A drafter with a free look (n-gram lookup) sees its first token checked at width 0. Where
    the later positions' estimates keep drafting from paying, it probes once the wait is over
    only while some row's first-token estimate reaches ``reveal`` and its proposal has a token
    beyond the first to learn about; a drafter without a free look probes regardless."""
    widths, active = (0, 4), rows(2)
    policy = W.Goodput(first_probe=3)
    costs = inputs([1.0, 2.6])
    gain = 0.95 * sum(W.PRIOR_LATER**j for j in range(4))
    assert 1.0 + gain < 2.6 * policy.margin  # the estimates alone never draft

    def steps_to_probe(first: float, hint: int, look: bool = True, limit: int = 40):
        accept = jnp.full((2, 4), W.PRIOR_LATER).at[:, 0].set(first)
        control = control_with(2, 4, widths, accept)
        hints = jnp.full((2,), hint, jnp.int32)
        for n in range(limit):
            index, control = policy.choose(control, costs, hints, active, look)
            if int(index):
                return n
            control = dataclasses.replace(control, idle=control.idle + 1)  # a width-0 step
        return None

    assert steps_to_probe(0.95, hint=4) == 3
    assert steps_to_probe(policy.reveal, hint=4) == 3
    assert steps_to_probe(policy.reveal - 0.05, hint=4) is None  # the first token does not hold
    assert steps_to_probe(0.95, hint=1) is None  # nothing beyond the first token to learn
    assert steps_to_probe(policy.reveal - 0.05, hint=4, look=False) == 3
    # One row is enough.
    accept = jnp.full((2, 4), W.PRIOR_LATER).at[:, 0].set(jnp.asarray([0.1, 0.9]))
    control = control_with(2, 4, widths, accept, idle=jnp.int32(3))
    assert int(policy.choose(control, costs, jnp.full((2,), 4, jnp.int32), active, True)[0]) == 1


def test_a_probe_is_made_only_where_the_rows_it_could_teach_could_pay_for_the_batch():
    """One hopeful row (a free look whose first token holds) probes alone; among 16 rows whose
    estimates keep them from drafting it does not, where a step at width 4 costs 3 one-token
    steps (one row's gain, at most 4 tokens, cannot pay the other rows' cost)."""
    widths, policy, costs = (0, 4), W.Goodput(), inputs([1.0, 3.0])

    def probes(batch: int) -> bool:
        accept = jnp.full((batch, 4), 0.05).at[0, 0].set(0.95)  # later positions: 0.05
        control = control_with(batch, 4, widths, accept, idle=jnp.int32(1000))
        hint = jnp.full((batch,), 4, jnp.int32)
        return int(policy.choose(control, costs, hint, rows(batch), True)[0]) == 1

    assert probes(1)
    assert not probes(16)


def test_observe_moves_each_seen_position_towards_its_verdict():
    """Positions up to the first rejection and proposed are seen; a first verdict replaces the
    prior (``prior_weight`` 0), later ones weigh ``1 / (seen + 1)`` until that falls below
    ``rate``; unseen positions, and done rows, keep their estimates."""
    widths, policy = (0, 2, 4), W.Goodput()
    control = W.init_control(4, 4, widths, jax.random.key(0))
    active = jnp.asarray([True, True, True, False])
    tau, proposed = jnp.asarray([0, 2, 4, 4]), jnp.asarray([4, 4, 1, 4])
    after = policy.observe(control, jnp.int32(2), active, tau, proposed, None)
    p, q = W.PRIOR, W.PRIOR_LATER
    want = [[0.0, q, q, q], [1.0, 1.0, 0.0, q], [1.0, q, q, q], [p, q, q, q]]
    np.testing.assert_allclose(np.asarray(after.accept), want)
    seen = [[1, 0, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]]
    assert np.asarray(after.seen).tolist() == seen
    assert np.asarray(after.steps).tolist() == [0, 0, 1] and int(after.last) == 2
    assert int(after.idle) == 0
    # A width-0 step counts as idle; a step with every row done is not counted.
    zero = policy.observe(after, jnp.int32(0), active, tau * 0, proposed * 0, None)
    assert int(zero.idle) == 1 and np.asarray(zero.steps).tolist() == [1, 0, 1]
    np.testing.assert_array_equal(zero.accept, after.accept)
    none = policy.observe(zero, jnp.int32(1), rows(4, False), tau, proposed, None)
    assert np.asarray(none.steps).tolist() == [1, 0, 1] and int(none.idle) == 0
    np.testing.assert_array_equal(none.accept, after.accept)


@pytest.mark.parametrize("prior_weight", [0.0, 2.0])
def test_the_moving_average_counts_the_prior_as_prior_weight_verdicts_then_settles_at_rate(
    prior_weight,
):
    """Verdicts ``v_1, v_2, ...`` at position 0: the estimate is the mean of the prior (counted
    ``prior_weight`` times) and the verdicts while ``1 / (n + prior_weight)`` is at least
    ``rate``, then an exponential moving average at ``rate``."""
    policy = W.Goodput(rate=0.25, prior_weight=prior_weight)
    control = W.init_control(1, 2, (0, 2), jax.random.key(0))
    active, proposed = rows(1), jnp.ones((1,), jnp.int32)
    verdicts = [1, 0, 1, 1, 0, 0, 1]
    got, want = [], []
    for n, v in enumerate(verdicts, start=1):
        control = policy.observe(control, jnp.int32(1), active, jnp.asarray([v]), proposed, None)
        got.append(float(control.accept[0, 0]))
        if 1.0 / (n + prior_weight) >= 0.25:
            want.append((prior_weight * W.PRIOR + sum(verdicts[:n])) / (prior_weight + n))
        else:
            want.append(want[-1] + 0.25 * (v - want[-1]))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert len(set(np.round(got, 4))) > 3  # (it moved)
    assert int(control.seen[0, 0]) == len(verdicts) and int(control.seen[0, 1]) == 0


def test_soft_overlap_values_replace_the_verdicts_where_reported():
    """With ``overlap`` (Σ min(p, q) per position, -1 where none) the estimate moves towards it
    where it is >= 0, towards the 0/1 verdict elsewhere; which positions are seen stays the
    verdicts' (tests/test_soft_verdicts.py: the step reporting it)."""
    policy = W.Goodput()
    control = W.init_control(2, 4, (0, 4), jax.random.key(0))
    tau, proposed, active = jnp.asarray([2, 0]), jnp.asarray([4, 4]), rows(2)
    overlap = jnp.asarray([[0.6, -1.0, 0.3, 0.8], [0.25, 0.7, 0.7, 0.7]])
    soft = policy.observe(control, jnp.int32(1), active, tau, proposed, overlap)
    q = W.PRIOR_LATER
    np.testing.assert_allclose(np.asarray(soft.accept), [[0.6, 1.0, 0.3, q], [0.25, q, q, q]])
    hard = policy.observe(control, jnp.int32(1), active, tau, proposed, None)
    np.testing.assert_array_equal(soft.seen, hard.seen)


def test_random_widths_draw_every_width_from_the_controllers_key():
    widths, active, hint = (0, 1, 3), rows(2), jnp.full((2,), 3, jnp.int32)
    policy, costs = W.RandomWidths(), inputs([1.0, 1.0, 1.0])

    def draws(key_seed: int, n: int = 300):
        control = W.init_control(2, 3, widths, jax.random.key(key_seed))
        out = []
        for _ in range(n):
            index, control = policy.choose(control, costs, hint, active, False)
            out.append(int(index))
            control = policy.observe(control, index, active, jnp.zeros(2, jnp.int32), hint, None)
        return out, control

    first, control = draws(0)
    counts = np.bincount(first, minlength=3)
    assert np.all(counts > 70), counts  # about 100 each
    assert draws(0)[0] == first and draws(1)[0] != first  # the key, and only the key
    assert np.asarray(control.steps).tolist() == counts.tolist()
    np.testing.assert_array_equal(control.accept, W.init_control(2, 3, widths, None).accept)
    assert int(policy.quota(control, costs)) == 1  # a new draw after every step


def test_fixed_takes_one_width_every_step():
    widths, active, hint = (0, 2, 4), rows(2), jnp.full((2,), 4, jnp.int32)
    control, costs = control_with(2, 4, widths, 0.0), inputs([1.0, 1.1, 1.2])
    assert int(W.Fixed().choose(control, costs, hint, active, False)[0]) == 2  # the largest
    assert int(W.Fixed(1).choose(control, costs, hint, active, False)[0]) == 1
    assert int(W.Fixed(0).choose(control, costs, hint, active, False)[0]) == 0
    assert int(W.Fixed(0).quota(control, costs)) == INT_MAX
    after = W.Fixed().observe(control, jnp.int32(2), active, jnp.asarray([4, 0]), hint, None)
    np.testing.assert_array_equal(after.accept, control.accept)
    assert np.asarray(after.steps).tolist() == [0, 0, 1]


def test_policy_of_names_the_policies_and_checks_an_object():
    assert isinstance(W.policy_of("auto"), W.Goodput)
    assert isinstance(W.policy_of("random"), W.RandomWidths)
    assert isinstance(W.policy_of("fixed"), W.Fixed)
    mine = W.Goodput(margin=1.0)
    assert W.policy_of(mine) is mine
    with pytest.raises(ValueError, match=r"'greedy' is not one of \['auto', 'fixed', 'random'\]"):
        W.policy_of("greedy")

    class NoQuota:
        def choose(self, *a):
            pass

        def observe(self, *a):
            pass

        quota = 3

    for bad in (object(), NoQuota()):
        with pytest.raises(TypeError, match="needs choose, observe and quota"):
            W.policy_of(bad)
    # DecodeConfig checks its width_policy the same way.
    with pytest.raises(ValueError, match="not one of"):
        DecodeConfig("block", widths=(0, 4), width_policy="greedy")
    with pytest.raises(TypeError, match="is not a WidthPolicy"):
        DecodeConfig("block", widths=(0, 4), width_policy=NoQuota())
    assert DecodeConfig("block", widths=(0, 4), width_policy=mine).width_policy is mine


def test_guessed_costs_and_checked_widths():
    np.testing.assert_allclose(W.guess_costs((0, 2, 4), 3), [1.0, 1.6, 2.2])
    assert W.guess_costs((0, 4), 1).dtype == np.float32
    W.check_widths((0, 2, 4), 4)
    W.check_widths((), 4)
    for bad, message in [
        ((0, 5), "within 0 .. L = 4"),
        ((2, 0), "distinct ascending"),
        ((0, 2, 2), "distinct ascending"),
        ((0,), "never speculates"),
    ]:
        with pytest.raises(ValueError, match=message):
            W.check_widths(bad, 4)
