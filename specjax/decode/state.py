"""The decoding state: one frozen pytree carried through every step and the while loop, and the
step statistics it carries (:class:`StepStats`, updated by one function for every kind of step)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.cache import KVCache
from specjax.row_sampling import RowSampling
from specjax.typing import Array, PRNGKey


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeState:
    """Everything a step reads and writes (shapes static for a whole generation).

    Attributes:
      tokens: int32 ``[B, U]`` prompt and generated tokens; ``tokens[b, :lengths[b]]`` is row
        b's sequence, the rest is scratch.
      lengths: int32 ``[B]`` committed tokens per row (the last one is not yet in the target
        cache: the next step feeds it).
      prompt_lengths: int32 ``[B]``.
      done: bool ``[B]`` rows that reached a stop token or ``max_new_tokens``.
      target_cache: the target's :class:`KVCache` (``lengths - 1`` entries per row).
      draft_state: the drafter's state (a draft cache, or ``()``).
      keys: per-row PRNG keys ``[B]`` (rows never share randomness), split every step.
      noise_keys: per-row keys ``[B]`` fixed for the generation: the Gumbel noise of a row's
        position n is drawn from ``fold_in(noise_keys[b], n)`` alone
        (:func:`specjax.verify.gumbel_noise`). Autoregressive sampling and the ``gumbel``
        verifier take the target's tokens from it, so their output does not depend on how
        many tokens a step committed.
      stats: the rows' :class:`StepStats`.
      control: the draft-width controller (:class:`~specjax.decode.widths.WidthControl`) when
        the step chooses its width (``DecodeConfig.widths``), else None.
      sampling: each row's sampling (:class:`~specjax.row_sampling.RowSampling`, ``[B]``
        each) where ``DecodeConfig.rows``, else None (the config's for every row).
      max_new_tokens: int32 ``[B]`` each row's own limit (at most the config's, which sizes
        the caches) where ``DecodeConfig.rows``, else None (the config's).
    """

    tokens: Array
    lengths: Array
    prompt_lengths: Array
    done: Array
    target_cache: KVCache
    draft_state: Any
    keys: PRNGKey
    noise_keys: PRNGKey
    stats: StepStats
    control: Any = None
    sampling: RowSampling | None = None
    max_new_tokens: Array | None = None

    @property
    def batch(self) -> int:
        """B."""
        return self.tokens.shape[0]

    def replace(self, **changes) -> DecodeState:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class StepStats:
    """Per-row counters of a generation (what :class:`~specjax.decode.Metrics` reads).

    Attributes:
      steps: int32 ``[B]`` target forwards while the row was active.
      accepted: int32 ``[B]`` accepted draft tokens.
      proposed: int32 ``[B]`` draft tokens proposed on the followed path.
      histogram: int32 ``[B, L + 1]`` steps by accepted length tau.
      position_accepted: int32 ``[B, L]`` steps whose draft position i was accepted.
      position_proposed: int32 ``[B, L]`` steps whose draft position i was proposed.
      last_accepted: int32 ``[B]`` tau of the latest step (-1 for inactive rows).
      invalid_drafts: int32 ``[B]`` steps whose draft was cut at a law that was not a
        probability vector (a NaN, an infinity or a negative entry: a broken drafter; see
        :func:`specjax.verify.common.sanitize_draft`).
      target_faults: int32 ``[B]`` steps whose target logits were not all finite (a NaN or an
        infinity: broken target weights or an overflow); the row is ended there and
        :func:`check_target` turns it into one error.
      last_overlap: float32 ``[B, L]`` the latest step's Σ min(p, q) of the target's and the
        draft's laws at each proposed position of a chain: the probability that token
        verification accepts there, which the width controller averages instead of the 0/1
        verdicts (:func:`specjax.decode.widths.observe`); -1 where the step computed none.
    """

    steps: Array
    accepted: Array
    proposed: Array
    histogram: Array
    position_accepted: Array
    position_proposed: Array
    last_accepted: Array
    invalid_drafts: Array
    target_faults: Array
    last_overlap: Array

    @classmethod
    def zeros(cls, batch: int, draft_len: int) -> StepStats:
        """Counters of ``batch`` rows before any step (L = ``draft_len``; 0 autoregressive)."""
        zeros = jnp.zeros((batch,), jnp.int32)
        return cls(
            steps=zeros,
            accepted=zeros,
            proposed=zeros,
            histogram=jnp.zeros((batch, draft_len + 1), jnp.int32),
            position_accepted=jnp.zeros((batch, draft_len), jnp.int32),
            position_proposed=jnp.zeros((batch, draft_len), jnp.int32),
            last_accepted=zeros - 1,
            invalid_drafts=zeros,
            target_faults=zeros,
            last_overlap=jnp.full((batch, draft_len), -1.0, jnp.float32),
        )

    def record(
        self,
        active: Array,
        tau: Array,
        followed: Array,
        invalid: Array | None = None,
        fault: Array | None = None,
        overlap: Array | None = None,
    ) -> StepStats:
        """The counters after one step (every kind of step calls this, and only this).

        Args:
          active: bool ``[B]`` rows the step advanced (the others keep their counters).
          tau: int ``[B]`` accepted draft tokens (0 for an autoregressive step).
          followed: int ``[B]`` draft tokens proposed on the followed path (0 likewise).
          invalid: bool ``[B]`` rows whose draft was cut at a law that was not a probability
            vector (None: none).
          fault: bool ``[B]`` rows whose target logits were not finite (None: none).
          overlap: float32 ``[B, L]`` Σ min(p, q) per proposed position, -1 elsewhere (None:
            not computed).
        """
        l_len = self.position_accepted.shape[1]
        on = active[:, None]
        pos = jnp.arange(l_len)[None, :]
        return StepStats(
            steps=self.steps + active,
            accepted=self.accepted + jnp.where(active, tau, 0),
            proposed=self.proposed + jnp.where(active, followed, 0),
            histogram=self.histogram + (on & (jnp.arange(l_len + 1)[None] == tau[:, None])),
            position_accepted=self.position_accepted + (on & (pos < tau[:, None])),
            position_proposed=self.position_proposed + (on & (pos < followed[:, None])),
            last_accepted=jnp.where(active, tau, -1),
            invalid_drafts=self.invalid_drafts
            + (0 if invalid is None else (active & invalid).astype(jnp.int32)),
            target_faults=self.target_faults
            + (0 if fault is None else (active & fault).astype(jnp.int32)),
            last_overlap=self._overlap(on, overlap),
        )

    def _overlap(self, on: Array, overlap: Array | None) -> Array:
        """``overlap [B, w]`` (w <= L: a narrowed step) padded to ``[B, L]`` with -1, and -1
        for inactive rows."""
        if overlap is None:
            return jnp.full_like(self.last_overlap, -1.0)
        pad = self.last_overlap.shape[1] - overlap.shape[1]
        overlap = jnp.pad(overlap.astype(jnp.float32), ((0, 0), (0, pad)), constant_values=-1.0)
        return jnp.where(on, overlap, -1.0)


class NonFiniteTarget(RuntimeError):
    """The target's logits held a NaN or an infinity: its output would be garbage."""


def check_target(stats: StepStats, rows=None) -> None:
    """Raises :class:`NonFiniteTarget` (one line naming the row and its step) if any row's
    target logits were not finite; ``stats`` is a host copy, ``rows`` the rows to look at
    (default all)."""
    faults = np.asarray(stats.target_faults)
    steps = np.asarray(stats.steps)
    if rows is not None:
        faults, steps = faults[np.asarray(rows)], steps[np.asarray(rows)]
    if not np.any(faults):
        return
    b = int(np.argmax(faults > 0))
    raise NonFiniteTarget(
        f"the target model's logits were not finite (NaN or inf) for row {b} at its step "
        f"{int(steps[b])}: its weights are broken (or its dtype overflowed); the run stopped "
        "there. Load the checkpoint again or convert it anew (float32 if bfloat16 overflows)"
    )
