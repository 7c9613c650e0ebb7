"""The width controller's choices (:mod:`specjax.decode.widths`), on hand-made estimates and
costs, without a model: the widest paying width, width 0 where drafts do not pay, probes and
their waits, forcing, how verdicts update the estimates, and which drafters with a free look
probe."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode import widths as W


def test_controller_choices():
    widths = (0, 2, 4)
    active = jnp.ones((3,), bool)
    hint = jnp.full((3,), 4, jnp.int32)
    costs = W.Policy(jnp.asarray([1.0, 1.15, 1.5]), jnp.int32(W.AUTO))
    control = W.WidthControl.init(3, 4, widths, jax.random.key(0))
    estimates = lambda p: {"accept": jnp.full((3, 4), p), "level": jnp.full((3, 4), p)}
    good = control.__class__(**{**control.__dict__, **estimates(0.9)})
    bad = control.__class__(**{**control.__dict__, **estimates(0.1)})
    assert int(W.choose(good, costs, hint, active, widths)[0]) == 2  # drafts pay: widest
    assert int(W.choose(bad, costs, hint, active, widths)[0]) == 0  # they do not: one token
    no_match = jnp.zeros((3,), jnp.int32)  # an n-gram drafter without a match: never draft
    assert int(W.choose(good, costs, no_match, active, widths)[0]) == 0
    # After PROBE width-0 steps the smallest width is tried once, then width 0 again for
    # twice as long; never for a drafter whose first proposal is checked for free while that
    # first token does not hold (0.1 < REVEAL: test below). (A probe here loses 1.15 - 1.11
    # width-0 steps: EXPLORE asks no longer wait.)
    idle = bad
    for wait in (W.PROBE, 2 * W.PROBE):
        for _ in range(wait):
            index, idle = W.choose(idle, costs, hint, active, widths)
            assert int(index) == 0
            assert int(W.choose(idle, costs, hint, active, widths, probe=False)[0]) == 0
        index, idle = W.choose(idle, costs, hint, active, widths)
        assert int(index) == 1 and int(idle.idle) == 0
    # No probe where even a fully accepted draft would not pay for its step: widths 2 and 4
    # cost more than 3 and 5 one-token steps (and 1.05 times that with the margin).
    hopeless = W.Policy(jnp.asarray([1.0, 2.9, 4.8]), jnp.int32(W.AUTO))
    assert not bool(W.could_pay(hopeless.costs, widths)) and bool(W.could_pay(costs.costs, widths))
    idle = bad
    for _ in range(4 * W.PROBE):
        index, idle = W.choose(idle, hopeless, hint, active, widths)
        assert int(index) == 0
    # A forced width is obeyed whatever the estimates.
    forced = W.Policy(costs.costs, jnp.int32(2))
    assert int(W.choose(bad, forced, hint, active, widths)[0]) == 2
    # Observing: positions past the first rejection, or not proposed, keep their estimates.
    after = W.observe(control, jnp.int32(2), active, jnp.asarray([0, 2, 4]), jnp.asarray([4, 4, 1]))
    a = np.asarray(after.accept)
    up = lambda p, rate=0.5: p + rate * (1 - p)  # a first observation weighs as the prior
    down = lambda p, rate=0.5: p * (1 - rate)
    first, later = W.PRIOR, W.PRIOR_LATER
    np.testing.assert_allclose(a[0], [down(first), later, later, later])
    np.testing.assert_allclose(a[1], [up(first), up(later), down(later), later])
    np.testing.assert_allclose(a[2], [up(first), later, later, later])
    assert np.asarray(after.steps).tolist() == [0, 0, 1]
    assert np.asarray(after.seen).tolist() == [[1, 0, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]]
    # Later observations weigh 1/3, 1/4, then RATE: the estimate settles.
    again = W.observe(after, jnp.int32(2), active, jnp.asarray([0, 2, 4]), jnp.asarray([4, 4, 1]))
    np.testing.assert_allclose(np.asarray(again.accept)[2, 0], up(up(first), 1 / 3))
    # One lucky probe does not reset the wait (a pair near break-even would probe every few
    # steps, each probe paying a drafting step, the draft's catch-up and a switch): only
    # estimates that choose drafting do (here: 1 + 3 accepted at cost 3 beats width 0 once,
    # but the settled estimates still favour width 0).
    waited = {"probe_after": jnp.int32(64), "probed": jnp.bool_(True), "seen": 99 + bad.seen}
    waited = bad.__class__(**{**bad.__dict__, **waited})  # (a probe's end is no stop to check)
    dear = W.Policy(jnp.asarray([1.0, 3.0, 5.0]), jnp.int32(W.AUTO))
    three = jnp.asarray([3, 3, 3])
    for accepted in (three, jnp.asarray([0, 0, 0])):
        probed = W.observe(waited, jnp.int32(1), active, accepted, three)
        index, after = W.choose(probed, dear, hint, active, widths)
        assert int(index) == 0 and int(after.probe_after) == 64
        # A dear probe waits until EXPLORE of the wait pays for its expected loss.
        gain = W.expected_accepted(after.level, hint, widths)[0, 1]
        loss = 3.0 - (1.0 + float(gain))
        assert int(after.wait) == int(np.ceil(loss / W.EXPLORE)) > 64
    drafting = W.choose(good, costs, hint, active, widths)[1]
    assert int(drafting.probe_after) == W.PROBE


def test_a_free_look_probes_only_a_proposal_whose_first_token_holds():
    """A drafter with a free look (n-gram lookup) sees only its first token checked at width 0.
    Where that token is accepted (estimate >= REVEAL) but a dear step keeps the later positions'
    prior from paying, it probes once after the usual wait (PROBE, and EXPLORE of the probe's
    expected loss), so the row can learn that the copy goes on. Below REVEAL, or with a
    one-token proposal, it never probes (benchmarks/history/, session 22: the mt90 trap)."""
    widths, rows, l_len = (0, 4), 2, 4
    active = jnp.ones((rows,), bool)
    policy = W.Policy(jnp.asarray([1.0, 2.6]), jnp.int32(W.AUTO))
    control = W.WidthControl.init(rows, l_len, widths, jax.random.key(0))
    later = jnp.full((rows, l_len), W.PRIOR_LATER)

    def steps_to_probe(first, hint, limit=200):
        accept = later.at[:, 0].set(first)
        c = control.__class__(**{**control.__dict__, "accept": accept, "level": accept})
        hints = jnp.full((rows,), hint, jnp.int32)
        for n in range(limit):
            index, c = W.choose(c, policy, hints, active, widths, probe=False)
            if int(index):
                return n
        return None

    # 1 + 0.95 (1 + 0.35 + 0.35^2 + 0.35^3) = 2.44 tokens do not pay for 2.6 (x MARGIN), so no
    # drafting by the estimates; the probe loses 0.16 steps: EXPLORE asks for 16 steps first.
    gain = 0.95 * sum(W.PRIOR_LATER**j for j in range(l_len))
    assert (1.0 + gain) < 2.6 * W.MARGIN
    assert steps_to_probe(0.95, hint=4) == int(np.ceil((2.6 - 1.0 - gain) / W.EXPLORE))
    assert steps_to_probe(W.REVEAL - 0.05, hint=4) is None  # the first token does not hold
    assert steps_to_probe(0.95, hint=1) is None  # nothing beyond the first token to learn
