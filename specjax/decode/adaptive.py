"""Steps that choose their draft width (a :class:`~specjax.decode.widths.WidthPolicy`), and
:func:`step`, the step a decode program runs.

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
    new, hidden = autoregressive_step(target, state, config, layers)
    extra = {"features": hidden} if layers else {}
    draft_state = drafter.skip(state.draft_state, state.tokens, state.lengths, ~state.done, **extra)
    return new.replace(draft_state=draft_state)


def width_hint(drafter, state: DecodeState) -> tuple[Array, Array]:
    """``(most tokens the drafter can propose [B], its first proposed token [B] or -1)``, known
    before drafting (:meth:`~specjax.drafters.base.Drafter.hint`)."""
    return drafter.hint(state.tokens, state.lengths)


def choose_width(
    drafter, state: DecodeState, config: DecodeConfig, inputs: width_control.WidthInputs
) -> tuple[Array, DecodeState]:
    """The index into ``config.widths`` of the width the next step takes (a replicated scalar),
    chosen by ``config``'s policy from what is known before the step drafts, and the state
    with the policy's bookkeeping done (``WidthControl.next`` set to the choice)."""
    hint, first = width_hint(drafter, state)
    policy = width_control.policy_of(config.width_policy)
    index, control = policy.choose(state.control, inputs, hint, ~state.done, drafter.free_look)
    kept = jnp.where(inputs.force < 0, index, -1).astype(jnp.int32)  # forcing decides afresh
    control = dataclasses.replace(control, first=jnp.where(hint > 0, first, -1), next=kept)
    return index, state.replace(control=control)


def next_width(
    drafter, state: DecodeState, config: DecodeConfig, inputs: width_control.WidthInputs
) -> tuple[Array, DecodeState]:
    """:func:`choose_width` for the first step of a decode call: the width already chosen after
    the previous call's last step when there is one (``WidthControl.next``), so a generation
    split over several calls (streaming, continuous batching) takes the widths one call would."""
    index, chosen = choose_width(drafter, state, config, inputs)
    kept = state.control.next >= 0
    control = jax.tree.map(
        lambda old, new: jax.lax.select(kept, old, new), state.control, chosen.control
    )
    return jnp.where(kept, state.control.next, index), state.replace(control=control)


def idle_quota(config: DecodeConfig, state: DecodeState, inputs) -> Array:
    """How many width-0 steps in a row a drafter without a free look runs before the policy
    chooses again (:meth:`~specjax.decode.widths.WidthPolicy.quota`, int32 ``[]`` >= 1): the
    decode program runs them as plain one-token steps and books them at once (:func:`book_idle`)."""
    return width_control.policy_of(config.width_policy).quota(state.control, inputs)


def book_idle(state: DecodeState, runs: Array, counted: Array) -> DecodeState:
    """The state after ``runs >= 1`` width-0 steps run by :func:`skip_step` alone for a drafter
    without a free look, as ``runs`` of :func:`width_step` would have left it (``counted``: those
    steps with an active row)."""
    control = state.control
    return state.replace(
        control=dataclasses.replace(
            control,
            steps=control.steps.at[0].add(counted),
            idle=control.idle + runs,
            last=jnp.int32(0),
            next=jnp.int32(-1),
        )
    )


def width_step(
    target: PureModel, drafter, state: DecodeState, config: DecodeConfig, index: int
) -> DecodeState:
    """One exact step at the static width ``config.widths[index]`` (chosen beforehand by
    :func:`choose_width`), and the policy's estimates updated from its verdicts."""
    active = ~state.done
    width = config.widths[index]
    if width == 0 and not drafter.free_look:  # nothing to observe: count the step
        new = skip_step(target, drafter, state, config)
        return book_idle(new, jnp.int32(1), jnp.any(active).astype(jnp.int32))
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
    policy = width_control.policy_of(config.width_policy)
    control = policy.observe(state.control, jnp.int32(index), active, tau, proposed, overlap)
    return new.replace(control=dataclasses.replace(control, next=jnp.int32(-1)))


def adaptive_step(
    target: PureModel,
    drafter,
    state: DecodeState,
    config: DecodeConfig,
    inputs: width_control.WidthInputs,
) -> DecodeState:
    """One step at the width the policy picks among ``config.widths`` (a ``lax.switch`` over
    :func:`width_step`; the decode program runs the same steps as nested loops instead, see
    :func:`specjax.decode.programs.decode_program`)."""
    index, state = choose_width(drafter, state, config, inputs)
    branches = [
        functools.partial(width_step, target, drafter, config=config, index=i)
        for i in range(len(config.widths))
    ]
    return jax.lax.switch(index, branches, state)
