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
