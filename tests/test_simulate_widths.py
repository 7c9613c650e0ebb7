"""``scripts/simulate_widths.py``: width policies simulated on synthetic acceptance."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import simulate_widths as sim
from benchlib import width_policies

from specjax.decode import widths


def test_the_simulation_drafts_where_drafts_pay_and_not_where_they_cannot():
    """With every draft accepted at a cheap step the policy drafts at every step and matches
    fixed drafting; with none accepted it drafts its first step, then only probes (after 3, 6,
    12 and 24 width-0 steps: the priced first wait is ceil(8 * 0.5 / (4 / 1.575 - 1)) = 3), at
    the autoregressive speed within a few percent."""
    policy = widths.Goodput()
    always = sim.Scenario(sim.steady([1.0] * 3), (1.0, 1.5))
    run = sim.simulate(always, policy, 4, 60)
    fixed = sim.best_fixed(always, 4, 60)
    assert np.allclose(fixed[1], 4 / 1.5) and np.all(fixed[0] == 1.0)
    assert np.all(run["speed"] >= 0.99 * fixed[1]) and np.all(run["steps"][:, 1] == 15)
    never = sim.Scenario(sim.steady([0.0] * 3), (1.0, 1.5))
    run = sim.simulate(never, policy, 4, 60)
    assert np.all(run["steps"][:, 1] == 5) and np.all(run["steps"][:, 0] == 55)
    assert np.allclose(run["speed"], 60 / 62.5)
    assert sim.score(run["speed"], sim.best_fixed(never, 4, 60), False) == pytest.approx(60 / 62.5)


def test_a_free_look_drafts_a_copy_and_soft_verdicts_run():
    """An n-gram copy (first tokens right, long matches) drafts most steps even where a drafting
    step costs 2.8 one-token steps, so that a first token always right does not pay by itself:
    its probes (``Goodput.reveal``) find the later ones; with them off it never drafts. A T = 1
    scenario (soft verdicts) runs."""
    copy = sim.SCENARIOS["n-gram copy prompt, cost 2.8"]
    run = sim.simulate(copy, widths.Goodput(), 4, 100)
    assert np.sum(run["steps"][:, 1]) > 2 * np.sum(run["steps"][:, 0])
    off = sim.simulate(copy, widths.Goodput(reveal=1.01), 4, 100)  # never probes: never drafts
    assert np.all(off["steps"][:, 1] == 0)
    soft = sim.SCENARIOS["T=1 Shakespeare (0.88-0.95, cost 3.2, catch-up 0.05)"]
    assert np.all(sim.simulate(soft, widths.Goodput(), 2, 50)["speed"] > 0.5)


def test_policies_parse_field_overrides():
    parsed = width_policies.parse_all(["default", "margin=1.0", "probe=4+probe_max=64"])
    assert list(parsed) == ["default", "margin=1.0", "probe=4+probe_max=64"]
    assert parsed["default"] == widths.Goodput()
    assert parsed["margin=1.0"] == dataclasses.replace(widths.Goodput(), margin=1.0)
    assert (
        parsed["probe=4+probe_max=64"].probe == 4 and parsed["probe=4+probe_max=64"].probe_max == 64
    )
    assert (
        not width_policies.parse("priced=false").priced and width_policies.parse("priced=1").priced
    )
    for bad in ("speed=2", "margin", "probe=2.5", "priced=maybe"):
        with pytest.raises(ValueError):
            width_policies.parse(bad)
