"""The draft width chosen per step, inside the compiled decode program.

A speculative step costs more than a one-token step (1 + K·w target tokens instead of 1, plus the
draft's w forwards), so it pays only while enough of its draft is accepted. With
``DecodeConfig.widths = (0, ..., L)`` every step picks one of those static draft lengths with a
``lax.switch``: width 0 is the genuine autoregressive step (one target token; a drafter skips its
draft), width w > 0 a speculative step whose drafter drafts w tokens per path (its own, smaller
tree program).

The choice (:func:`choose`) reads only what is known before the step's draft is verified:

* ``WidthControl.accept [B, L]``: per row, an exponential moving average of "draft position i was
  accepted, given that positions < i were accepted and i was proposed", updated after each step
  from the verdicts of *earlier* steps, or where a chain step reports it, their expectation
  Σ min(p, q) (token verification's acceptance; the verdict itself at temperature 0, less noise at
  temperature > 0; :attr:`DecodeConfig.soft_verdicts`). For a drafter without a free look at its
  proposals the choice reads ``WidthControl.level [B, L]`` instead: a slow average of the same
  verdicts, started at the pair's prior, that the fast one resets when it departs from it by more
  than its own noise (:data:`CHANGE`; downwards only when the next verdict confirms it), so a run of
  rejections at the row's usual acceptance does not stop a draft that pays, and a change of regime
  does within a few steps (:data:`BONUS`, off as shipped, would lift a level below the prior by a
  standard error of the row's observations);
* the drafter's hint ``[B]`` (:meth:`width_hint`): how many tokens it can propose at all (an
  n-gram drafter without a match: 0);
* the cost of a step at each width relative to a one-token step, ``costs [Y]``, what a probe
  costs beyond its step (``switch``) and the pair's acceptance as a row's prior (``prior [L]``),
  measured on the compiled program itself (:mod:`specjax.decode.calibration`), or
  :func:`guess_costs` and :func:`default_prior` until then.

It maximises the batch's expected goodput ``sum_b (1 + E_b[accepted | w]) / costs[w]`` with
``E_b[accepted | w] = sum_{j <= min(w, hint_b)} prod_{i <= j} accept[b, i]``. After
``PROBE`` steps at width 0 it tries the smallest non-zero width once, so a draft whose acceptance
recovers is noticed; the wait doubles after each probe until the estimates choose to draft, and
is at least long enough for the probe's expected loss to be :data:`EXPLORE` of it (a model
draft's catch-up, :attr:`Policy.catch_up`, makes a probe dearer with every step it waits). A
stop of the controller's own right after a change of regime is checked by one probe ``PROBE``
steps later whatever it costs, and undone where the probe accepts (:attr:`WidthControl.held`).
Drafters whose first proposal is checked for free at width 0 (n-gram lookup) probe only where
that check says a row's first token holds (:data:`REVEAL`), since only drafting shows whether
the later ones do; no probe is made where even a fully accepted draft would not pay for its
step (:func:`could_pay`). The choice is one scalar for the whole batch (a reduction over rows), so
under a mesh every device takes the same branch.

Exactness does not depend on the controller: each width is an exact step of its own and the
width is fixed before that step runs, so the output law is the target's whatever the widths. A
controller that looked at the current verdict would break that; the decode program gives it no
way to (the next width is chosen from the state after a step, the verdict exists only inside
it), and ``tests/test_widths.py`` shows that a planted one that peeks is caught by the
sequence-law test.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.decode import probes
from specjax.decode.probes import EXPLORE, PROBE, PROBE_MAX, REVEAL  # noqa: F401 (this API)
from specjax.decode.width_priors import (  # noqa: F401 (part of this module's API)
    PRIOR,
    PRIOR_LATER,
    default_prior,
    guess_costs,
    prior_from_counts,
)
from specjax.typing import Array, PRNGKey

RATE = 0.25
"""Weight of the newest observation in the moving average."""

SLOW, PRIOR_WEIGHT, CHANGE = 1 / 32, 8, 2.0
"""The level (:attr:`WidthControl.level`): weight of the newest observation, observations the
prior counts as, and how many standard deviations of a fast average at the level's acceptance
(``sqrt(p (1 - p) RATE / (2 - RATE))``) the fast average must depart by for the level to
follow it: upwards at once, downwards when the next verdict at that position confirms it
(:attr:`WidthControl.suspect`). From 0.5 that is six rejections in a row (the SmolLM2 head
kept 88% of fixed drafting's speed when three stopped it, 96% after); from 0.9, three: two
already depart by 2 standard deviations there, yet come once in a hundred verdicts, and
followed at once they stopped the Shakespeare pair at temperature 1 for good (simulated: 94.5% of
fixed drafting, 99.0% with the confirmation; benchmarks/history/, session 13)."""

BONUS = 0.0
"""For a drafter without a free look: where a row's level is below the pair's prior, its choice
reads the level lifted by this many standard errors of a row observed ``seen + PRIOR_WEIGHT``
times (``sqrt(p (1 - p) / (seen + PRIOR_WEIGHT))``), at most back to the prior. Off (0) as
shipped: it helped rows of the SmolLM2 head and cost the Shakespeare pair at temperature 1 its
gain (docs/adaptive_width.md; benchmarks/history/, session 11)."""

MARGIN = 1.05
"""How much a drafting width's expected goodput must beat width 0's (measured costs are noisy,
and a step that drafts in vain costs more than one that does not)."""

AUTO, RANDOM = -1, -2
"""``force`` values: let the controller choose; draw the width uniformly at random each step
(exactness tests). Else ``force`` is the index of the width to use."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class WidthControl:
    """The controller's part of the decode state.

    Attributes:
      accept: float32 ``[B, L]`` moving average of per-position conditional acceptance.
      seen: int32 ``[B, L]`` observations behind each estimate (the first few weigh more:
        the prior is one pseudo-observation, so a good draft is believed after a few probes).
      level: float32 ``[B, L]`` the slow average of the same observations (:data:`SLOW`; the
        prior weighs :data:`PRIOR_WEIGHT` observations), set to ``accept`` where the two part
        by more than :data:`CHANGE` standard deviations (downwards: twice in a row, see
        ``suspect``); what the choice reads for a drafter without a free look.
      suspect: bool ``[B, L]`` a rejection took ``accept`` below the level by more than
        :data:`CHANGE` standard deviations; the level follows it down only if the next
        verdict at that position is a rejection that keeps it there (a confirmed drop).
      before: float32 ``[B, L]`` the level before the latest drafting step's verdicts.
      held: float32 ``[B, L]`` where the controller stopped drafting by its own choice right
        after a change of regime took a level down (:data:`CHANGE`), the level before the
        verdicts that stopped it (``before``; -1: none): a probe comes :data:`PROBE` width-0
        steps later whatever it costs (a *check*), and where it accepts a position, both
        averages return to ``held`` (the drop was a run of bad luck, and this row would
        otherwise wait for probes that a model draft's catch-up makes rarer the longer it
        waits). The next drafting step clears it. (A level that sank step by step to its
        stop is not checked: from an optimistic prior, checks that undid such stops kept a
        pair whose drafts lose drafting.)
      probed: bool ``[]`` whether the latest step was a probe (whose return to width 0 is no
        stop of the controller's own).
      idle: int32 ``[]`` consecutive width-0 steps.
      probe_after: int32 ``[]`` width-0 steps before the next probe (doubling after each).
      wait: int32 ``[]`` width-0 steps before the next probe, at least ``probe_after`` and long
        enough for :data:`EXPLORE` to pay for the probe (set by :func:`choose`).
      key: the PRNG key of the random policy (one for the batch: every device draws alike).
      steps: int32 ``[Y]`` decode steps taken at each width (while any row was active).
      last: int32 ``[]`` the index of the latest step's width (-1 before any step).
      first: int32 ``[B]`` the first token the drafter would propose in the next step, when it
        is known before drafting (n-gram lookup; -1 otherwise): a width-0 step checks it.
      next: int32 ``[]`` the index of the width the next step takes, chosen after the latest
        step under the automatic or random policy (-1: not chosen yet, or chosen by forcing),
        so a generation split over several decode calls takes the widths one call would.
      widths: the static widths (``DecodeConfig.widths``).
    """

    accept: Array
    seen: Array
    level: Array
    suspect: Array
    before: Array
    held: Array
    probed: Array
    idle: Array
    probe_after: Array
    wait: Array
    key: PRNGKey
    steps: Array
    last: Array
    first: Array
    next: Array
    widths: tuple[int, ...] = dataclasses.field(default=(), metadata=dict(static=True))

    @classmethod
    def init(
        cls, batch: int, draft_len: int, widths: tuple[int, ...], key: PRNGKey
    ) -> WidthControl:
        """The controller before any step."""
        prior = jnp.full((batch, draft_len), PRIOR_LATER, jnp.float32).at[:, 0].set(PRIOR)
        return cls(
            accept=prior,
            seen=jnp.zeros((batch, draft_len), jnp.int32),
            level=prior,
            suspect=jnp.zeros((batch, draft_len), bool),
            before=prior,
            held=jnp.full((batch, draft_len), -1.0, jnp.float32),
            probed=jnp.bool_(False),
            idle=jnp.int32(0),
            probe_after=jnp.int32(PROBE),
            wait=jnp.int32(PROBE),
            key=key,
            steps=jnp.zeros((len(widths),), jnp.int32),
            last=jnp.int32(-1),
            first=jnp.full((batch,), -1, jnp.int32),
            next=jnp.int32(-1),
            widths=tuple(widths),
        )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Policy:
    """Runtime inputs of the controller (arguments of the decode program, not compiled in).

    Attributes:
      costs: float32 ``[Y]`` cost of a step at each width relative to width 0's.
      force: int32 ``[]``: :data:`AUTO`, :data:`RANDOM`, or the index of the width every step
        uses (calibration, experiments).
      prior: float32 ``[L]`` a row's acceptance estimates before its first observation at each
        draft position (:func:`default_prior` when None; ``Run.calibrate`` measures the pair's
        own while it measures the costs).
      switch: float32 ``[]`` what a step at ``widths[1]`` right after width-0 steps costs
        beyond its step, in width-0 steps (the change of loop; a feature draft's catch-up of
        its few pending tokens; 0 when None).
      catch_up: float32 ``[]`` what each width-0 step since the last drafting step adds to
        that, in width-0 steps: a model draft's cache falls behind by one token per width-0
        step and the next drafting step feeds what it missed (0 when None).
    """

    costs: Array
    force: Array
    prior: Array | None = None
    switch: Array | None = None
    catch_up: Array | None = None


def expected_accepted(accept: Array, hint: Array, widths: tuple[int, ...]) -> Array:
    """``[B, Y]`` expected accepted draft tokens per row at each width.

    Args:
      accept: ``[B, L]`` per-position conditional acceptance estimates.
      hint: int ``[B]`` the most tokens the drafter can propose per row.
      widths: the static widths (each <= L).
    """
    reach = jnp.cumprod(accept, axis=1)  # [B, L] P(positions 0..i all accepted)
    cum = jnp.concatenate([jnp.zeros_like(reach[:, :1]), jnp.cumsum(reach, axis=1)], axis=1)
    w = jnp.minimum(jnp.asarray(widths, jnp.int32)[None, :], hint[:, None])  # [B, Y]
    return jnp.take_along_axis(cum, w, axis=1)


def best_width(
    accept: Array, costs: Array, hint: Array, active: Array, widths: tuple[int, ...]
) -> tuple[Array, Array]:
    """``(gain [B, Y], index [])``: the expected accepted tokens per row at each width for
    estimates ``accept [B, L]``, and the index of the width with the batch's best expected
    goodput ``sum_b (1 + gain[b, w]) / costs[w]`` over active rows, a drafting width held to
    :data:`MARGIN` (ties: the smaller width)."""
    gain = expected_accepted(accept, hint, widths)  # [B, Y]
    margin = jnp.where(jnp.asarray(widths) > 0, MARGIN, 1.0)  # [Y]
    goodput = jnp.sum(jnp.where(active[:, None], 1.0 + gain, 0.0), axis=0) / (costs * margin)
    return gain, jnp.argmax(goodput).astype(jnp.int32)


def could_pay(costs: Array, widths: tuple[int, ...]) -> Array:
    """bool ``[]``: whether some drafting width would beat width 0 by :data:`MARGIN` if every
    draft token were accepted. If none would, a probe can only lose, so none is made."""
    w = jnp.asarray(widths, jnp.float32)  # [Y]
    best = (1.0 + w) / (costs * MARGIN)  # [Y] goodput of a fully accepted draft
    return jnp.any((w > 0) & (best > 1.0 / costs[0]))


def choose(
    control: WidthControl,
    policy: Policy,
    hint: Array,
    active: Array,
    widths: tuple[int, ...],
    probe: bool = True,
    random: bool = False,
) -> tuple[Array, WidthControl]:
    """The index of this step's width (a replicated scalar) and the controller after choosing.

    Args:
      control: the controller state.
      policy: costs and forcing.
      hint: int ``[B]`` the most tokens the drafter can propose per row (before verification).
      active: bool ``[B]`` rows not done.
      widths: the static widths; ``widths[0]`` must be the smallest.
      probe: False for a drafter whose first proposal is checked for free at width 0 (n-gram):
        it reads ``accept``, not ``level``, and probes only while a first token holds.
      random: whether ``policy.force`` may be :data:`RANDOM` (the draw is compiled in only then).
    """
    if policy.prior is not None:  # rows not observed yet start from the pair's prior
        unseen = control.seen == 0
        accept = jnp.where(unseen, policy.prior[None, :], control.accept)
        level = jnp.where(unseen, policy.prior[None, :], control.level)
        control = dataclasses.replace(control, accept=accept, level=level)
    estimate = control.level if probe else control.accept  # [B, L]
    if probe and BONUS > 0 and policy.prior is not None:  # (traced only with the lift on)
        spread = jnp.clip(estimate * (1.0 - estimate), 0.01, 0.25)
        bonus = BONUS * jnp.sqrt(spread / (control.seen + PRIOR_WEIGHT).astype(jnp.float32))
        lifted = jnp.minimum(estimate + bonus, policy.prior[None, :])  # at most to the prior
        estimate = jnp.maximum(estimate, lifted)
    costs = policy.costs
    if probe and policy.switch is not None:  # after width 0, drafting pays the switch too
        switching = (control.last == 0) & (jnp.asarray(widths) > 0)  # [Y]
        costs = costs + jnp.where(switching, probes.switch_cost(policy, control.idle), 0.0)
    gain, best = best_width(estimate, costs, hint, active, widths)
    can_draft = jnp.any(active & (hint > 0))
    loss_wait = probes.loss_wait(gain, policy, active, widths)
    recheck = jnp.any(active[:, None] & (control.held >= 0))  # a stop to check: probe soon
    wait = jnp.where(recheck, PROBE, jnp.maximum(control.probe_after, loss_wait))
    probing = (widths[0] == 0) & (best == 0) & (control.idle >= wait) & can_draft
    probing = probing & (len(widths) > 1) & could_pay(policy.costs, widths)
    if not probe:  # a free look: probe only to learn the later positions of a good proposal
        probing = probing & probes.worth_revealing(estimate, hint, active)
    auto = jnp.where(probing, 1, best)
    after = jnp.where(probing, jnp.minimum(2 * control.probe_after, PROBE_MAX), control.probe_after)
    after = jnp.where(best > 0, PROBE, after)  # drafting pays: probe again soon once it stops
    key, drawn = control.key, jnp.int32(0)
    if random:
        key, k_draw = jax.random.split(control.key)
        drawn = jax.random.randint(k_draw, (), 0, len(widths), jnp.int32)
    index = jnp.where(policy.force == AUTO, auto, jnp.where(policy.force == RANDOM, drawn, 0))
    index = jnp.where(policy.force >= 0, policy.force, index).astype(jnp.int32)
    index = jnp.clip(index, 0, len(widths) - 1)
    width = jnp.asarray(widths, jnp.int32)[index]
    idle = jnp.where(width == 0, control.idle + 1, 0)
    after = jnp.where(policy.force == AUTO, after, control.probe_after).astype(jnp.int32)
    held = control.held
    if probe:  # a change of regime stopped the drafting: check it after PROBE steps
        stop = (control.last > 0) & ~control.probed & (width == 0) & (policy.force == AUTO)
        dropped = control.before - control.level > CHANGE * _noise(control.before)
        check = stop & active & jnp.any(dropped, axis=1)  # [B]
        held = jnp.where(check[:, None], control.before, held)
    recheck = jnp.any(active[:, None] & (held >= 0)) & ~probing
    wait = jnp.where(recheck, PROBE, jnp.maximum(after, loss_wait))
    probed = probing & (policy.force == AUTO)
    return index, dataclasses.replace(
        control,
        idle=idle.astype(jnp.int32),
        probe_after=after,
        wait=wait,
        key=key,
        held=held,
        probed=probed,
    )


def _noise(level: Array) -> Array:
    """The standard deviation of the fast average (:data:`RATE`) of verdicts accepted with
    probability ``level`` (clipped away from 0 and 1), what :data:`CHANGE` counts in."""
    return jnp.sqrt(jnp.clip(level * (1.0 - level), 0.01, 0.25) * RATE / (2.0 - RATE))


def observe(
    control: WidthControl,
    index: Array,
    active: Array,
    tau: Array,
    proposed: Array,
    overlap: Array | None = None,
) -> WidthControl:
    """The controller after a step, given its verdicts (for later steps' choices).

    Args:
      index: the step's width index.
      active: bool ``[B]`` rows the step advanced.
      tau: int ``[B]`` accepted draft tokens.
      proposed: int ``[B]`` draft tokens the followed path proposed (0 at width 0, where a
        drafter with a free proposal may pass 1 and tau in {0, 1} for its first token).
      overlap: float32 ``[B, L]`` Σ min(p, q) per position (-1: none), averaged instead of the
        verdicts (their expectation; module docstring). Stops and checks follow the verdicts.
    """
    l_len = control.accept.shape[1]
    pos = jnp.arange(l_len)[None, :]
    seen = active[:, None] & (pos < proposed[:, None]) & (pos <= tau[:, None])  # [B, L]
    hit = (pos < tau[:, None]).astype(jnp.float32)
    value = hit if overlap is None else jnp.where(overlap >= 0, overlap, hit)  # [B, L]
    rate = jnp.maximum(RATE, 1.0 / (control.seen + 2).astype(jnp.float32))  # [B, L]
    accept = jnp.where(seen, control.accept + rate * (value - control.accept), control.accept)
    slow = jnp.maximum(SLOW, 1.0 / (control.seen + 1 + PRIOR_WEIGHT).astype(jnp.float32))
    level = jnp.where(seen, control.level + slow * (value - control.level), control.level)
    changed = seen & (control.seen >= 3) & (jnp.abs(accept - level) > CHANGE * _noise(level))
    down = changed & (accept < level) & (hit == 0.0)  # a rejection that departs downwards
    confirmed = down & control.suspect  # and the one before it at this position did too
    suspect = jnp.where(seen, down & ~control.suspect, control.suspect)
    # A change of regime: the level follows at once upwards, and downwards once confirmed.
    level = jnp.where((changed & (accept > level)) | confirmed, accept, level)
    # A stop held since the row's previous drafting step: an accepted verdict undoes it.
    held = control.held
    undone = seen & (hit > 0) & (held >= 0)  # both averages return to before the stop
    level = jnp.where(undone, jnp.maximum(level, held), level)
    accept = jnp.where(undone, jnp.maximum(accept, held), accept)
    drafted = (active & (proposed > 0))[:, None]  # [B, 1] a drafting step settles the check
    held = jnp.where(drafted, -1.0, held)
    before = jnp.where(drafted, control.level, control.before)
    counted = jnp.any(active).astype(jnp.int32)
    steps = control.steps.at[index].add(counted)
    return dataclasses.replace(
        control,
        accept=accept,
        level=level,
        suspect=suspect,
        before=before,
        held=held,
        seen=control.seen + seen.astype(jnp.int32),
        steps=steps,
        last=index,
    )


def check_widths(widths: tuple[int, ...], draft_len: int) -> None:
    """Raises ValueError unless ``widths`` are distinct, ascending and within ``0 .. L``."""
    if not widths:
        return
    if list(widths) != sorted(set(widths)) or widths[0] < 0 or widths[-1] > draft_len:
        raise ValueError(
            f"widths {widths} must be distinct ascending draft lengths within 0 .. L = "
            f"{draft_len} (e.g. (0, 2, {draft_len}))"
        )
    if widths == (0,):
        raise ValueError("widths=(0,) never speculates; use verifier='autoregressive' instead")
