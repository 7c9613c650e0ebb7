"""The draft width chosen per step inside the compiled decode program: a :class:`WidthPolicy`.

A speculative step costs more than a one-token step (1 + K·w target tokens instead of 1, plus the
draft's w forwards), so it pays only while enough of its draft is accepted. With
``DecodeConfig.widths = (0, ..., L)`` every step takes one of those static draft lengths: width 0
is the genuine autoregressive step (a drafter skips its draft), width w > 0 a speculative step
drafting w tokens per path. ``widths=()`` is :class:`Fixed`: every step drafts L, no controller.

A policy sees only what is known before a step drafts (its estimates, the drafter's hint, the
width costs) and learns from the step's verdicts after it (:meth:`WidthPolicy.observe`). Each
width is an exact step and the width is fixed before its step runs, so the output law is the
target's whatever a policy chooses (``tests/test_widths.py`` plants a policy that peeks at the
current verdict and the sequence-law test catches it). At temperature > 0 the widths do change
which random numbers a verifier reads, so the costs a policy weighs must not come from a clock
there, unless the verifier is ``gumbel`` (:mod:`specjax.decode.costs`).

The policies:

* :class:`Goodput` (``width_policy="auto"``, the default): per row an exponential moving average
  of "draft position i was accepted, given positions < i were", from hard verdicts or, for chain
  steps that report it, their expectation Σ min(p, q) (:attr:`DecodeConfig.soft_verdicts`). Each
  step takes the width with the batch's best expected goodput ``sum_b (1 + E_b[accepted | w]) /
  costs[w]`` (a drafting width must beat width 0 by :attr:`Goodput.margin` to start drafting,
  and drafting goes on while it beats width 0 times :attr:`Goodput.keep`). A width-0 step
  shows a drafter nothing, so after a wait of width-0 steps (:attr:`Goodput.probe`, scaled by
  what a probe costs over what it could gain) it tries ``widths[1]`` once, and the wait doubles
  after each probe that does not restart drafting (to :attr:`Goodput.probe_max`). A drafter
  with a free look at its first token (n-gram lookup) learns that token's verdict at width 0
  and probes only while it is likely (:attr:`Goodput.reveal`). A probe is made only where it
  could pay: drafting must beat width 0 for the batch with the rows it could teach accepting
  their whole proposals.
* :class:`RandomWidths` (``"random"``): a width drawn uniformly each step (exactness tests).
* :class:`Fixed` (``"fixed"``): one width every step (``widths=()``: L, with no controller).

The choice is one scalar for the batch (a reduction over rows), so under a mesh every device
takes the same branch.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

from specjax.typing import Array, PRNGKey

AUTO = -1
"""``WidthInputs.force``: let the policy choose; else the index of the width every step takes
(cost measurement, experiments)."""

PRIOR, PRIOR_LATER = 0.5, 0.35
"""A row's acceptance estimates before any verdict: the first draft position, and each later one
given the earlier ones (cautious: a later position is only seen when a step reaches it)."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class WidthControl:
    """The controller's part of the decode state.

    Attributes:
      accept: float32 ``[B, L]`` per-row estimates of per-position conditional acceptance.
      seen: int32 ``[B, L]`` verdicts behind each estimate.
      idle: int32 ``[]`` consecutive width-0 steps.
      wait: int32 ``[]`` width-0 steps before the next probe (doubling after each; 0: the
        policy's first wait).
      key: the PRNG key of :class:`RandomWidths` (one for the batch: every device draws alike).
      steps: int32 ``[Y]`` decode steps taken at each width (while any row was active).
      last: int32 ``[]`` the index of the latest step's width (-1 before any step).
      first: int32 ``[B]`` the drafter's next first token where known before drafting (n-gram
        lookup; -1 otherwise): a width-0 step checks it.
      next: int32 ``[]`` the width index the next step takes, chosen after the latest step (-1:
        none yet, or forced), so a generation split over decode calls takes one call's widths.
      widths: the static widths (``DecodeConfig.widths``).
    """

    accept: Array
    seen: Array
    idle: Array
    wait: Array
    key: PRNGKey
    steps: Array
    last: Array
    first: Array
    next: Array
    widths: tuple[int, ...] = dataclasses.field(default=(), metadata=dict(static=True))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class WidthInputs:
    """Runtime inputs of the policy (arguments of the decode program, not compiled in).

    Attributes:
      costs: float32 ``[Y]`` the cost of a step at each width relative to width 0's.
      force: int32 ``[]`` :data:`AUTO`, or the index of the width every step takes.
    """

    costs: Array
    force: Array


class WidthPolicy(Protocol):
    """How a step's draft width is chosen (static: part of the compiled program's key)."""

    def choose(
        self, control: WidthControl, inputs: WidthInputs, hint: Array, active: Array, look: bool
    ) -> tuple[Array, WidthControl]:
        """``(index [], control)``: the next step's width index, from what is known before it
        drafts: ``hint [B]`` the most tokens the drafter can propose per row, ``active [B]``
        rows not done, ``look`` whether the drafter's first token is known before drafting."""

    def observe(
        self,
        control: WidthControl,
        index: Array,
        active: Array,
        tau: Array,
        proposed: Array,
        overlap: Array | None,
    ) -> WidthControl:
        """The controller after a step at width ``index``: ``tau [B]`` accepted tokens,
        ``proposed [B]`` tokens the followed path proposed, ``overlap [B, L]`` Σ min(p, q) per
        position (-1: none; None when the step does not report it)."""

    def quota(self, control: WidthControl, inputs: WidthInputs) -> Array:
        """int32 ``[]`` (>= 1): width-0 steps a drafter without a free look runs in a row before
        the next choice (those steps show it nothing, so the program runs them as plain
        one-token steps and books them at once)."""


def init_control(batch: int, draft_len: int, widths: tuple[int, ...], key) -> WidthControl:
    """The controller before any step: the default prior, no step taken (every policy's)."""
    prior = jnp.full((batch, draft_len), PRIOR_LATER, jnp.float32).at[:, 0].set(PRIOR)
    return WidthControl(
        accept=prior,
        seen=jnp.zeros((batch, draft_len), jnp.int32),
        idle=jnp.int32(0),
        wait=jnp.int32(0),
        key=key,
        steps=jnp.zeros((len(widths),), jnp.int32),
        last=jnp.int32(-1),
        first=jnp.full((batch,), -1, jnp.int32),
        next=jnp.int32(-1),
        widths=tuple(widths),
    )


def expected_accepted(accept: Array, hint: Array, widths: tuple[int, ...]) -> Array:
    """``[B, Y]`` expected accepted draft tokens per row at each width, for estimates
    ``accept [B, L]`` and at most ``hint [B]`` proposed tokens."""
    reach = jnp.cumprod(accept, axis=1)  # [B, L] P(positions 0..i all accepted)
    cum = jnp.concatenate([jnp.zeros_like(reach[:, :1]), jnp.cumsum(reach, axis=1)], axis=1)
    w = jnp.minimum(jnp.asarray(widths, jnp.int32)[None, :], hint[:, None])  # [B, Y]
    return jnp.take_along_axis(cum, w, axis=1)


def best_width(
    accept: Array, costs: Array, hint: Array, active: Array, widths: tuple[int, ...], margin
) -> Array:
    """int32 ``[]``: the width index with the batch's best expected goodput
    ``sum_b (1 + E_b[accepted | w]) / costs[w]`` over active rows, a drafting width's cost
    raised by ``margin`` (ties: the smaller width)."""
    gain = expected_accepted(accept, hint, widths)  # [B, Y]
    raise_by = jnp.where(jnp.asarray(widths) > 0, margin, 1.0)  # [Y]
    goodput = jnp.sum(jnp.where(active[:, None], 1.0 + gain, 0.0), axis=0) / (costs * raise_by)
    return jnp.argmax(goodput).astype(jnp.int32)


def could_pay(costs: Array, widths: tuple[int, ...], margin) -> Array:
    """bool ``[]``: whether some drafting width would beat width 0 by ``margin`` with every
    draft token accepted. If none would, a probe can only lose, so none is made."""
    w = jnp.asarray(widths, jnp.float32)
    return jnp.any((w > 0) & ((1.0 + w) / (costs * margin) > 1.0 / costs[0]))


def _forced(index: Array, inputs: WidthInputs, n: int) -> Array:
    """``index``, or the forced one where :attr:`WidthInputs.force` names a width."""
    return jnp.clip(jnp.where(inputs.force >= 0, inputs.force, index), 0, n - 1).astype(jnp.int32)


def _counted(control: WidthControl, index: Array, active: Array) -> WidthControl:
    """``control`` with a step at ``index`` booked (idle steps counted, ``last`` set)."""
    width = jnp.asarray(control.widths, jnp.int32)[index]
    return dataclasses.replace(
        control,
        steps=control.steps.at[index].add(jnp.any(active).astype(jnp.int32)),
        idle=jnp.where(width == 0, control.idle + 1, 0).astype(jnp.int32),
        last=jnp.asarray(index, jnp.int32),
    )


@dataclasses.dataclass(frozen=True)
class Goodput:
    """The default policy (module docstring); its knobs, each a field.

    TODO(width-policy): a probe after ``W`` width-0 steps also pays a lazy draft's catch-up,
    ~0.05 W one-token steps on the CPU (the draft reads what it missed). Pricing it into the wait
    does not help, as a longer wait makes each probe dearer by as much; what would is a draft
    that keeps up for free (a GPU's catch-up is one forward) or fewer probes per generation.

    Attributes:
      rate: the weight of the newest verdict in the moving average (the first few weigh
        ``1 / (seen + 1 + prior_weight)``).
      prior_weight: how many verdicts the default prior counts as.
      margin: how much a drafting width's expected goodput must beat width 0's after a width-0
        step (to start drafting).
      keep: the same factor after a drafting step (to go on drafting): below ``margin``, a band
        in which noise in the estimates does not flip the width.
      first_probe: width-0 steps before a generation's first probe (0: its first step drafts).
      probe, probe_max: the wait after drafting stops, doubling after each probe that does
        not restart drafting, to at most ``probe_max``.
      priced: scale the first wait by what a probe costs beyond a width-0 step over what a
        fully accepted one would gain (``probe · (c_1 - 1) / ((1 + w_1) / (c_1 margin) - 1)``):
        a draft whose step costs ~4 one-token steps probes ~40x less often than one costing 1.6.
      reveal: for a drafter with a free look, the first-token estimate from which a row's
        proposal is worth a probe (only drafting shows whether its later tokens hold).
    """

    rate: float = 0.1
    prior_weight: float = 0.0
    margin: float = 1.05
    keep: float = 0.9
    first_probe: int = 0
    probe: int = 8
    probe_max: int = 128
    priced: bool = True
    reveal: float = 0.8

    def choose(self, control, inputs, hint, active, look):
        widths = control.widths
        margin = jnp.where(control.last > 0, self.keep, self.margin)
        best = best_width(control.accept, inputs.costs, hint, active, widths, margin)
        hopeful = active & (hint > 0)  # rows a probe could teach
        if look:  # the first token's verdict is known: probe for the later ones
            hopeful &= (hint >= 2) & (control.accept[:, 0] >= self.reveal)
        # A probe is made only where drafting would pay with the hopeful rows' proposals
        # accepted whole (the others at their estimates): in a batch, one hopeful row of 16
        # cannot pay for a step 16 rows wide.
        best_case = jnp.where(hopeful[:, None], 1.0, control.accept)
        can_pay = best_width(best_case, inputs.costs, hint, active, widths, self.margin) > 0
        wait = self._wait(control)
        probing = (widths[0] == 0) & (best == 0) & (control.idle >= wait) & can_pay
        index = _forced(jnp.where(probing, 1, best), inputs, len(widths))
        first = self._first_wait(inputs.costs, widths)
        wait = jnp.where(probing, jnp.clip(2 * wait, first, self.probe_max), wait)
        wait = jnp.where(best > 0, first, wait)  # drafting pays: probe again soon once not
        wait = jnp.where(inputs.force == AUTO, wait, control.wait).astype(jnp.int32)
        return index, dataclasses.replace(control, wait=wait)

    def quota(self, control, inputs):
        unbounded = jnp.iinfo(jnp.int32).max  # no probe can pay, or width 0 forced
        quota = jnp.maximum(self._wait(control) - control.idle, 1)
        quota = jnp.where(could_pay(inputs.costs, control.widths, self.margin), quota, unbounded)
        return jnp.where(inputs.force == AUTO, quota, unbounded).astype(jnp.int32)

    def _first_wait(self, costs, widths):
        """The wait after drafting stops: ``probe`` times what a probe costs beyond a width-0
        step over what a fully accepted one would gain (a dear draft probes seldom)."""
        if not self.priced or len(widths) < 2:  # (one width: nothing to probe)
            return jnp.int32(self.probe)
        w = widths[1]
        spend = costs[1] / costs[0] - 1.0
        gain = (1.0 + w) * costs[0] / (costs[1] * self.margin) - 1.0
        wait = jnp.ceil(self.probe * spend / jnp.maximum(gain, 1e-3))
        return jnp.clip(wait, 1, self.probe_max).astype(jnp.int32)

    def _wait(self, control):
        """Width-0 steps before the next probe (``WidthControl.wait``; 0: none probed yet)."""
        return jnp.where(control.wait > 0, control.wait, self.first_probe)

    def observe(self, control, index, active, tau, proposed, overlap):
        pos = jnp.arange(control.accept.shape[1])[None, :]
        seen = active[:, None] & (pos < proposed[:, None]) & (pos <= tau[:, None])  # [B, L]
        hit = (pos < tau[:, None]).astype(jnp.float32)
        value = hit if overlap is None else jnp.where(overlap >= 0, overlap, hit)
        rate = jnp.maximum(self.rate, 1.0 / (control.seen + 1 + self.prior_weight))
        accept = jnp.where(seen, control.accept + rate * (value - control.accept), control.accept)
        control = dataclasses.replace(control, accept=accept, seen=control.seen + seen)
        return _counted(control, index, active)


@dataclasses.dataclass(frozen=True)
class RandomWidths:
    """A width drawn uniformly at every step (exactness tests: any width sequence is exact)."""

    def choose(self, control, inputs, hint, active, look):
        key, draw = jax.random.split(control.key)
        index = jax.random.randint(draw, (), 0, len(control.widths), jnp.int32)
        return _forced(index, inputs, len(control.widths)), dataclasses.replace(control, key=key)

    def quota(self, control, inputs):
        return jnp.where(inputs.force >= 0, jnp.iinfo(jnp.int32).max, 1).astype(jnp.int32)

    def observe(self, control, index, active, tau, proposed, overlap):
        return _counted(control, index, active)


@dataclasses.dataclass(frozen=True)
class Fixed:
    """Every step at ``widths[index]`` (default the largest). ``widths=()`` is the same choice
    without a controller in the state: every step drafts L."""

    index: int = -1

    def choose(self, control, inputs, hint, active, look):
        index = jnp.int32(self.index % len(control.widths))
        return _forced(index, inputs, len(control.widths)), control

    def quota(self, control, inputs):
        return jnp.int32(jnp.iinfo(jnp.int32).max)  # (width 0 chosen: for good)

    def observe(self, control, index, active, tau, proposed, overlap):
        return _counted(control, index, active)


POLICIES = {"auto": Goodput(), "random": RandomWidths(), "fixed": Fixed()}
"""The policies ``DecodeConfig.width_policy`` names."""


def policy_of(policy: str | WidthPolicy) -> WidthPolicy:
    """The policy a ``DecodeConfig.width_policy`` value names (a policy passes through)."""
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"width_policy {policy!r} is not one of {sorted(POLICIES)}")
        return POLICIES[policy]
    for method in ("choose", "observe", "quota"):
        if not callable(getattr(policy, method, None)):
            raise TypeError(
                f"width_policy {policy!r} is not a WidthPolicy: it needs choose, observe and quota"
            )
    return policy


def guess_costs(widths: tuple[int, ...], num_paths: int, per_token: float = 0.1) -> np.ndarray:
    """Relative step costs read from no clock: ``1 + per_token · K · w`` (float32 ``[Y]``)."""
    return np.asarray([1.0 + per_token * num_paths * w for w in widths], np.float32)


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
