"""When the width controller (:mod:`specjax.decode.widths`) tries a width its estimates do not
choose: a drafter without a free look learns nothing at width 0, so after a while it *probes*
the smallest drafting width once, if the probe's expected loss is a small share of the wait. A
drafter with a free look at its first proposal probes only while that first token holds
(:data:`REVEAL`). (``policy`` below is a :class:`~specjax.decode.widths.Policy`.)
"""

from __future__ import annotations

import jax.numpy as jnp

from specjax.typing import Array

PROBE, PROBE_MAX = 8, 128
"""Width-0 steps after which the smallest non-zero width is tried once; the wait doubles after
each probe (up to ``PROBE_MAX``) until the controller chooses to draft by itself again (a
probe also waits for :data:`EXPLORE`)."""

EXPLORE = 0.01
"""The share of width-0 time probes may lose: a probe waits until its expected loss (its step's
cost and :attr:`Policy.switch` beyond the tokens the estimates expect of it) is at most this
share of the width-0 steps since the last one."""


REVEAL = 0.8
"""For a drafter with a free look at its first proposal (n-gram lookup): the first-token estimate
from which a row's proposal is worth a probe. The free look keeps that estimate current, but
later positions keep their prior until the row drafts; where a step is dear (a width-6 step
costing 2.2 or more one-token steps on this CPU), a prior of 0.35 on them never pays for
drafting even while every first token is accepted, and the row never learns that the copy goes
on (benchmarks/history/, session 20: mt90). Probes then follow the same waits and :data:`EXPLORE`
as for drafters without a free look; below this estimate none is made (chat prompts, where
short copied phrases end after a token or two)."""


def switch_cost(policy, idle: Array) -> Array:
    """float32 ``[]`` what a drafting step after ``idle`` width-0 steps costs beyond its step, in
    width-0 steps: :attr:`Policy.switch` and :attr:`Policy.catch_up` per width-0 step."""
    switch = 0.0 if policy.switch is None else policy.switch
    return switch + _catch_up(policy) * idle.astype(jnp.float32)


def _catch_up(policy):
    """:attr:`Policy.catch_up` (0 when None)."""
    return 0.0 if policy.catch_up is None else policy.catch_up


def loss_wait(gain: Array, policy, active: Array, widths: tuple[int, ...]) -> Array:
    """int32 ``[]`` width-0 steps ``w`` a probe at ``widths[1]`` must wait for its expected loss
    to be at most :data:`EXPLORE` of them: the loss is its cost and its switch after ``w``
    width-0 steps (:func:`switch_cost`), in width-0 steps, less the ``1 + E[accepted]`` tokens the
    estimates expect (``gain [B, Y]``, mean over active rows). Where each width-0 step adds
    :data:`EXPLORE` or more to the switch (:attr:`Policy.catch_up`), no wait is long enough."""
    if len(widths) < 2:
        return jnp.int32(0)
    rows = jnp.maximum(jnp.sum(active), 1)
    expected = jnp.sum(jnp.where(active, gain[:, 1], 0.0)) / rows
    loss = policy.costs[1] / policy.costs[0] + switch_cost(policy, jnp.int32(0)) - (1.0 + expected)
    # What each width-0 step of waiting earns towards the probe's loss.
    budget = EXPLORE - _catch_up(policy)
    steps = jnp.where(budget > 0.0, jnp.maximum(loss, 0.0) / budget, 1e6)
    return jnp.ceil(jnp.clip(steps, 0.0, 1e6)).astype(jnp.int32)


def worth_revealing(accept: Array, hint: Array, active: Array) -> Array:
    """bool ``[]``: whether a drafter with a free look should probe: some active row proposes
    two tokens or more and expects its first to be accepted (at least :data:`REVEAL`). Its free
    look checks only that first token, so only drafting shows whether the later ones are. (A
    hint never exceeds the draft length, so a drafter of one token never probes.)"""
    return jnp.any(active & (hint >= 2) & (accept[:, 0] >= REVEAL))
