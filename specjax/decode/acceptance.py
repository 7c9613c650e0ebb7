"""The pair's acceptance per draft position: what a width controller's rows start from.

How often a model draft's proposals are accepted belongs to the pair (target and draft
weights, sampling, verifier), not to one compiled program: for a drafter without a free look at
its proposals, the programs of a pair (prompt buckets, batch sizes) count into one
:class:`Acceptance` (:func:`of_pair`), calibration's forced drafting steps (after the generation
they preceded) and the drafting steps of every generation and of every finished row of a batch
job (:func:`learns`). (An n-gram drafter's acceptance is the
prompt's, copying or not, more than the pair's, and it sees each first verdict for free: its
rows start from the default prior, and nothing is counted.) Until the pair's counts are known
well (:data:`SETTLE`), rows start from their upper confidence bound (:attr:`Acceptance.upper`:
optimism that drafting steps correct, where pessimism would stop the drafting that could
correct it); a calibrated program then fixes its prior.

The steps a controller chose to draft are a selected sample (a row drafts more where its drafts
are accepted, and stops after a run of rejections): on the SmolLM2 head at temperature 0 they put
the pair at 0.51 / 0.50 / 0.46 per position after 23 prompts, against 0.49 / 0.53 / 0.59 from 770
forced drafting steps on 7 prompts. What matters is that a prior from one prompt is worse: too high,
it costs a new row a few drafting steps before its own verdicts take over; too low, it can cost a
drafter without a free look (which learns only by drafting) a whole generation of one-token steps.
"""

from __future__ import annotations

import dataclasses
import weakref

import jax
import numpy as np

from specjax.decode import adaptive, widths
from specjax.decode.programs import PROGRAMS, signature

PRIOR_COUNT = 2.0
"""How many observations the default prior counts as in :attr:`Acceptance.prior`."""

SETTLE = 512
"""First-position observations after which the pair's acceptance is known well enough for a
calibrated program to fix its prior (:attr:`~specjax.decode.calibration.Calibration.settled`).
Prompts differ more than binomially: 256 drafting steps of the SmolLM2 head over its first 4
held-out prompts put it at 0.44 / 0.43 / 0.38 per position, 1169 over 23 at 0.50 / 0.47 / 0.46.
Fixed after one prompt, a program kept what that prompt said: the head's first prompt bucket,
calibrated on a prompt whose drafts are accepted less than most (0.41 / 0.57 / 0.10 from 38
steps), took one-token steps on every later prompt of that bucket, among them one where fixed
drafting ran 1.55x faster."""


@dataclasses.dataclass
class Acceptance:
    """A pair's acceptance per draft position, counted over every program of the pair.

    Acceptance belongs to the target and draft (and the sampling and verifier), not to a
    program's shapes, so the programs of one pair (prompt buckets, batch sizes) pool their
    counts: a program calibrated after others starts from what they saw, not from one round of
    its own. ``Run`` keeps one per pair (``PROGRAMS.pairs``, keyed by the models' weights as
    well as their shapes).

    Attributes:
      accepted: ``[L]`` draft positions accepted.
      reached: ``[L]`` draft positions reached (proposed, every earlier position accepted).
    """

    accepted: np.ndarray
    reached: np.ndarray

    @classmethod
    def empty(cls, draft_len: int) -> Acceptance:
        return cls(np.zeros((draft_len,), np.int64), np.zeros((draft_len,), np.int64))

    @property
    def known(self) -> bool:
        """Whether the first position has been observed :data:`SETTLE` times."""
        return bool(self.reached[0] >= SETTLE) if len(self.reached) else True

    @property
    def prior(self) -> np.ndarray:
        """``[L]`` the counts as acceptance estimates (:func:`widths.prior_from_counts`)."""
        return widths.prior_from_counts(self.accepted, self.reached, PRIOR_COUNT)

    @property
    def error(self) -> np.ndarray:
        """``[L]`` the binomial standard error of :attr:`prior`."""
        prior = self.prior.astype(np.float64)
        return np.sqrt(prior * (1.0 - prior) / (self.reached + PRIOR_COUNT))

    @property
    def upper(self) -> np.ndarray:
        """``[L]`` :attr:`prior` plus its standard error: what rows start from while the pair is
        not :attr:`known`. A drafter without a free look learns only by drafting, so a prior
        that a few unlucky steps put too low would keep its rows, and with them the counts,
        from drafting; one a standard error too high costs a row a few drafting steps before
        its own verdicts take over, and the counts learn from them."""
        return np.clip(self.prior + self.error, 0.0, 1.0).astype(np.float32)

    def add(self, other: Acceptance) -> None:
        """Adds ``other``'s counts."""
        self.accepted = self.accepted + other.accepted
        self.reached = self.reached + other.reached

    def count(self, before, after) -> None:
        """Adds the draft positions accepted and reached between two
        :class:`~specjax.decode.state.StepStats` (host copies) of the same generation
        (``before`` None: from its start)."""
        accepted = np.sum(after.position_accepted, axis=0)
        proposed = np.sum(after.position_proposed, axis=0)
        if before is not None:
            accepted = accepted - np.sum(before.position_accepted, axis=0)
            proposed = proposed - np.sum(before.position_proposed, axis=0)
        # Position i > 0 is reached where i - 1 was accepted (and i proposed).
        reached = np.minimum(proposed, np.concatenate([proposed[:1], accepted[:-1]]))
        self.accepted = self.accepted + accepted
        self.reached = self.reached + reached


def of_pair(models, config, draft_len: int) -> Acceptance:
    """The acceptance counts of the pair ``models = (target, drafter)`` (as a decode program
    receives them) under ``config``, kept in ``PROGRAMS.pairs``: per weights, not only shapes
    (two drafts of one shape accept differently), and per sampling and verifier (configs that
    differ only in ``max_new_tokens`` are one pair)."""
    leaves = jax.tree.leaves(models)
    config = dataclasses.replace(config, max_new_tokens=1)
    key = (signature(models), config, tuple(map(id, leaves)))
    kept = PROGRAMS.pairs.get(key)
    # Weights freed and others allocated at their addresses would reuse their ids: an entry
    # counts only while its first weight is alive.
    if kept is None or (leaves and kept[1]() is not leaves[0]):
        for stale in [k for k, (_, ref) in PROGRAMS.pairs.items() if ref() is None]:
            del PROGRAMS.pairs[stale]
        kept = PROGRAMS.pairs[key] = (Acceptance.empty(draft_len), _ref(leaves))
    return kept[0]


def learns(config, drafter) -> bool:
    """Whether generations add their drafting steps to the pair's counts: for a drafter without
    a free look (an n-gram drafter is steered by its look at each proposal, not by the prior)
    under the automatic policy with measured costs (given costs start rows from the default)."""
    return (
        bool(config.widths)
        and not config.width_costs
        and config.force_width == widths.AUTO
        and not adaptive.free_look(drafter)
    )


def teach(run, before, after) -> bool:
    """Adds the drafting steps between two :class:`~specjax.decode.state.StepStats` (host
    copies; ``before`` None: from the start) of ``run`` (a :class:`~specjax.decode.loop.Run`)
    to its pair's counts, where generations teach them (:func:`learns`) and the run's program
    keeps a calibration; returns whether it did."""
    record = run.calibration()
    if record is None or not learns(run.config, run.drafter):
        return False
    record.pair.count(before, after)
    return True


def _ref(leaves: list):
    """A weak reference to the first of ``leaves`` (a callable giving it, or None once freed;
    a leaf that takes no weak reference, or none, is held as it is)."""
    if not leaves:
        return lambda: None
    try:
        return weakref.ref(leaves[0])
    except TypeError:
        first = leaves[0]
        return lambda: first
