"""The width controller's costs (``Run.calibrate``): measured only where they steer
something, kept across calls of a program when one generation is too short to measure them all.
"""

from __future__ import annotations

import numpy as np

from specjax import sampling
from specjax.decode import DecodeConfig, generate
from specjax.decode.buckets import DEFAULT
from specjax.decode.seams import PROGRAMS, Run
from specjax.drafters import ModelDrafter
from tests.test_widths import GREEDY, PROMPTS, autoregressive, models  # noqa: F401 (fixtures)


def test_random_widths_sample_repeats_whatever_the_timing(models):  # noqa: F811
    """At T = 1 under the random policy a seed gives one sample: nothing is calibrated (the costs
    steer nothing), so the widths and draws do not depend on how long a step took. A slowed
    first call (as a mesh or a loaded machine would give) used to take other widths."""
    target, draft = models
    params = sampling.SamplingParams(1.0)
    drafter = ModelDrafter(draft, num_paths=1, draft_len=3, sampling=params)
    cfg = DecodeConfig("block", params, 12, widths=(0, 1, 3), width_policy="random")
    PROGRAMS.costs.clear()
    first = generate(target, PROMPTS, cfg, drafter, seed=6)
    assert not PROGRAMS.costs, PROGRAMS.costs  # nothing measured
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
    PROGRAMS.costs.pop(run.key, None)
    PROGRAMS.estimates.pop(run.key, None)
    partial = []
    for _ in range(40):
        out = generate(target, PROMPTS, cfg, drafter)
        assert out.tokens == [row[:10] for row in autoregressive]
        if run.calibrated:
            break
        partial.append(PROGRAMS.estimates.get(run.key))
    assert run.calibrated and partial and any(partial), partial
    assert run.costs[0] == 1.0 and np.all(run.costs[1:] >= 1.0)
