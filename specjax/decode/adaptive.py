"""Steps that choose their draft width (:mod:`specjax.decode.widths`), and :func:`step`, the
step a decode program runs.

Width 0 is :func:`skip_step`, a genuine one-token target step in which the drafter only takes
note of the committed token; width w > 0 is :func:`~specjax.decode.step.speculative_step` with
the drafter narrowed to w tokens per path. :func:`choose_width` picks the next width from what is
known before drafting; :func:`width_step` runs one static width; :func:`adaptive_step` is both in
one call (a ``lax.switch``, for stepping by hand; the decode program runs one loop per width).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from specjax.decode import widths as width_control
from specjax.decode.config import DecodeConfig
from specjax.decode.state import DecodeState
from specjax.decode.step import (
    autoregressive_step,
    feature_layers,
    speculative_step,
)
from specjax.models.pure import PureModel
from specjax.typing import Array


def skip_step(target: PureModel, drafter, state: DecodeState, config: DecodeConfig):
    """Width 0 of an adaptive step: a genuine one-token target step. The drafter drafts
    nothing; it only takes note of the committed token (``drafter.skip``)."""
    layers = feature_layers(drafter)
    if layers:
        new, hidden = autoregressive_step(target, state, config, layers)
        extra = {"features": hidden}
    else:
        new, extra = autoregressive_step(target, state, config), {}
    draft_state = drafter.skip(state.draft_state, state.tokens, state.lengths, ~state.done, **extra)
    return new.replace(draft_state=draft_state)


def width_hint(drafter, state: DecodeState) -> tuple[Array, Array]:
    """``(most tokens the drafter can propose [B], its first proposed token [B] or -1)``,
    known before drafting (an n-gram drafter's match; L and -1 for drafters that must draft)."""
    hint = getattr(drafter, "hint", None)
    if hint is None:
        b = state.batch
        return jnp.full((b,), drafter.draft_len, jnp.int32), jnp.full((b,), -1, jnp.int32)
    return hint(state.tokens, state.lengths)


def free_look(drafter) -> bool:
    """Whether the drafter's first proposal is known before drafting (:meth:`hint`), so a
    width-0 step can check it for free; drafters without one need probes instead."""
    return hasattr(drafter, "hint")


def choose_width(
    drafter, state: DecodeState, config: DecodeConfig, policy: width_control.Policy
) -> tuple[Array, DecodeState]:
    """The index into ``config.widths`` of the width the next step takes (a replicated scalar),
    from what is known before it drafts (:func:`specjax.decode.widths.choose`), and the state
    with the controller's bookkeeping done.

    For a drafter without a free look at its proposals, a width-0 step observes nothing, so the
    estimates do not change: after one, the controller stays at width 0 without re-deciding
    until a probe is due (a few dozen fewer operations per step, which matters when a step
    takes well under a millisecond)."""
    hint, first = width_hint(drafter, state)
    probe = not free_look(drafter)
    random = config.width_policy == "random"
    choose = functools.partial(
        width_control.choose,
        policy=policy,
        hint=hint,
        active=~state.done,
        widths=config.widths,
        probe=probe,
        random=random,
    )
    control = state.control
    if not (probe and config.widths[0] == 0):
        index, control = choose(control)
        control = dataclasses.replace(control, first=jnp.where(hint > 0, first, -1))
    else:
        stay = lambda c: (jnp.int32(0), dataclasses.replace(c, idle=c.idle + 1))
        can_probe = width_control.could_pay(policy.costs, config.widths)  # else: 0 for good
        probe_due = (control.idle + 1 >= control.wait) & can_probe
        due = (control.last != 0) | probe_due | (policy.force != width_control.AUTO)
        index, control = jax.lax.cond(due, choose, stay, control)
    kept = jnp.where(policy.force < 0, index, -1).astype(jnp.int32)  # forcing decides afresh
    return index, state.replace(control=dataclasses.replace(control, next=kept))


def next_width(
    drafter, state: DecodeState, config: DecodeConfig, policy: width_control.Policy
) -> tuple[Array, DecodeState]:
    """:func:`choose_width` for the first step of a decode call: the width already chosen after
    the previous call's last step when there is one (``WidthControl.next``), so a generation
    split over several calls (streaming, calibration, continuous batching) takes the widths one
    call would."""
    index, chosen = choose_width(drafter, state, config, policy)
    kept = state.control.next >= 0
    control = jax.tree.map(
        lambda old, new: jax.lax.select(kept, old, new), state.control, chosen.control
    )
    return jnp.where(kept, state.control.next, index), state.replace(control=control)


def never_drafts(
    drafter, policy: width_control.Policy, widths: tuple[int, ...], steps: int
) -> bool:
    """Whether the automatic controller takes width 0 at every one of a generation's first
    ``steps`` steps (host values of ``policy``, a settled calibration's): then the generation is
    an autoregressive one, and :meth:`~specjax.decode.loop.Run.plain` runs it as one.

    It holds for a drafter without a free look (a width-0 step observes nothing, so its
    estimates stay at the pair's prior; every row alike) whose first choice, made by
    :func:`~specjax.decode.widths.choose` itself, is width 0 and whose first probe would come
    after ``steps`` steps or never (:func:`~specjax.decode.widths.could_pay`): later choices
    read the same estimates at costs raised by the switch back to drafting (``switch`` and
    ``catch_up`` >= 0), and the wait the first choice set does not shrink."""
    if free_look(drafter) or widths[0] != 0 or int(policy.force) != width_control.AUTO:
        return False
    if min(float(policy.switch), float(policy.catch_up)) < 0:
        return False
    l_len = drafter.draft_len
    control = width_control.WidthControl.init(1, l_len, widths, jax.random.key(0))
    hint, active = jnp.full((1,), l_len, jnp.int32), jnp.ones((1,), bool)
    index, chosen = width_control.choose(control, policy, hint, active, widths)
    if int(index) != 0:
        return False
    return not bool(width_control.could_pay(policy.costs, widths)) or int(chosen.wait) >= steps


def idle_quota(control: width_control.WidthControl, policy: width_control.Policy) -> Array:
    """How many width-0 steps in a row a drafter without a free look takes before
    :func:`choose_width` decides again (int32 ``[]``, >= 1), given the controller as the choice of
    width 0 left it: until a probe is due under the automatic policy, else one.

    :func:`choose_width` only counts those steps (its ``stay``), so the decode program runs them
    as plain one-token steps and books them at once (:func:`book_idle`): the same widths, the
    same state, none of the controller's per-step work. Where no probe can pay
    (:func:`~specjax.decode.widths.could_pay`), and with width 0 forced (calibration: timed as
    the automatic policy runs it), the run lasts to the end; under the random policy every step
    draws."""
    unbounded = jnp.iinfo(jnp.int32).max
    quota = jnp.maximum(control.wait - control.idle, 1)
    quota = jnp.where(width_control.could_pay(policy.costs, control.widths), quota, unbounded)
    forced = jnp.where(policy.force >= 0, unbounded, 1)
    return jnp.where(policy.force == width_control.AUTO, quota, forced).astype(jnp.int32)


def book_idle(state: DecodeState, runs: Array, counted: Array) -> DecodeState:
    """The state after ``runs >= 1`` width-0 steps run by :func:`skip_step` alone for a drafter
    without a free look, as :func:`width_step` and the ``runs - 1`` stays of
    :func:`choose_width` between them would have left it (``counted``: those steps with an active
    row)."""
    control = state.control
    return state.replace(
        control=dataclasses.replace(
            control,
            steps=control.steps.at[0].add(counted),
            idle=control.idle + runs - 1,
            last=jnp.int32(0),
            next=jnp.int32(-1),
        )
    )


def width_step(
    target: PureModel, drafter, state: DecodeState, config: DecodeConfig, index: int
) -> DecodeState:
    """One exact step at the static width ``config.widths[index]`` (chosen beforehand by
    :func:`choose_width`), and the controller's estimates updated from its verdicts."""
    active = ~state.done
    width = config.widths[index]
    if width == 0 and not free_look(drafter):  # nothing to observe: count the step
        new = skip_step(target, drafter, state, config)
        control = state.control
        steps = control.steps.at[index].add(jnp.any(active).astype(jnp.int32))
        control = dataclasses.replace(control, steps=steps, last=jnp.int32(0), next=jnp.int32(-1))
        return new.replace(control=control)
    if width == 0:
        first = state.control.first  # [B] the proposal's first token, known when choosing
        new = skip_step(target, drafter, state, config)
        token = jnp.take_along_axis(new.tokens, state.lengths[:, None], axis=1)[:, 0]
        offered = first >= 0  # a free proposal: would it have been accepted?
        tau, proposed = (offered & (token == first)).astype(jnp.int32), offered.astype(jnp.int32)
    else:
        narrow = dataclasses.replace(drafter, draft_len=width)
        new = speculative_step(target, narrow, state, config)
        tau, proposed = new.stats.last_accepted, new.stats.proposed - state.stats.proposed
    overlap = new.stats.last_overlap if width > 0 and config.soft_verdicts else None
    control = width_control.observe(state.control, jnp.int32(index), active, tau, proposed, overlap)
    return new.replace(control=dataclasses.replace(control, next=jnp.int32(-1)))


def adaptive_step(
    target: PureModel,
    drafter,
    state: DecodeState,
    config: DecodeConfig,
    policy: width_control.Policy,
) -> DecodeState:
    """One step at the width the controller picks among ``config.widths`` (a ``lax.switch``
    over :func:`width_step`; the decode program runs the same steps as nested loops instead,
    see :func:`specjax.decode.programs.decode_program`)."""
    index, state = choose_width(drafter, state, config, policy)
    branches = [
        functools.partial(width_step, target, drafter, config=config, index=i)
        for i in range(len(config.widths))
    ]
    return jax.lax.switch(index, branches, state)


def step(
    target: PureModel,
    drafter,
    state: DecodeState,
    config: DecodeConfig,
    policy: width_control.Policy | None = None,
) -> DecodeState:
    """The step ``config`` asks for: autoregressive when not speculative, adaptive when the
    state carries a width controller (``policy`` then gives its costs), else speculative at the
    drafter's full width."""
    if not config.speculative:
        return autoregressive_step(target, state, config)
    if state.control is not None:
        return adaptive_step(target, drafter, state, config, policy)
    return speculative_step(target, drafter, state, config)
