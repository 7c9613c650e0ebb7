"""``scripts/simulate_widths.py``: the controller simulated on synthetic acceptance."""

from __future__ import annotations

import simulate_widths as sim


def test_the_simulation_drafts_where_drafts_pay_and_not_where_they_cannot():
    """With every draft accepted at a cheap step the controller drafts at every step and
    matches fixed drafting; with none accepted it only probes, once its probe's expected loss
    is 1% of the width-0 steps before it (here after 58), at the autoregressive speed within
    that 1%."""
    step = sim.stepper(3)
    always = sim.Scenario(lambda t: [1.0] * 3, (1.0, 1.5), 0.1, (0.9,) * 3)
    adaptive, fixed, drafting = sim.simulate(always, 0, 60, step)
    assert fixed == 4 / 1.5 and adaptive > 0.97 * fixed and drafting >= 14
    never = sim.Scenario(lambda t: [0.0] * 3, (1.0, 1.5), 0.1, (0.02,) * 3)
    adaptive, fixed, drafting = sim.simulate(never, 0, 60, step)
    assert drafting == 1 and adaptive >= 0.99 and fixed == 1 / 1.5
