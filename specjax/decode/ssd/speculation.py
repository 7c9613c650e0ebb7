"""SSD's data: the static knobs, the speculation cache, the outcome a round sends back to the
draft devices, the counters and the draft-side state (see :mod:`specjax.decode.ssd.drafter`)."""

from __future__ import annotations

import dataclasses

import jax

from specjax.decode.ssd.fanout import branch_layout, fan_out_excess
from specjax.drafters.base import Draft
from specjax.models.cache import KVCache
from specjax.typing import Array, PRNGKey

BACKUPS = ("jit", "ngram", "none")
FROM_CACHE, FROM_JIT, FROM_FAST = 0, 1, 2  # where a served speculation came from


@dataclasses.dataclass(frozen=True)
class SSDConfig:
    """Static SSD knobs.

    Attributes:
      fan_out: ``(F_0, ..., F_L)`` bonus guesses per accepted length, for rows whose current
        speculation came from the cache (:mod:`specjax.decode.ssd.fanout`).
      fan_out_miss: the same for rows served by a backup (same sum C); None: ``fan_out``.
      saguaro: Saguaro's factor on the top tokens' probabilities (0 < factor <= 1; 1 = off).
      saguaro_top: how many top tokens it scales (0: the largest F_k).
      backup: ``jit``, ``ngram`` or ``none`` (see the module docstring).
      ngram_max: longest suffix the ``ngram`` backup matches; ngram_min: the shortest.
    """

    fan_out: tuple[int, ...] = (1, 1, 1, 1, 1)
    fan_out_miss: tuple[int, ...] | None = None
    saguaro: float = 1.0
    saguaro_top: int = 0
    backup: str = "jit"
    ngram_max: int = 3
    ngram_min: int = 1

    def __post_init__(self):
        branch_layout(self.fan_out)  # validates
        miss = self.miss_fan_out
        if len(miss) != len(self.fan_out) or sum(miss) != sum(self.fan_out):
            raise ValueError(
                f"fan_out_miss {miss} must have the length and sum of fan_out {self.fan_out}"
            )
        branch_layout(miss)
        if not 0.0 < self.saguaro <= 1.0:
            raise ValueError(f"saguaro factor must be in (0, 1] (1 = off), got {self.saguaro}")
        if self.backup not in BACKUPS:
            raise ValueError(f"unknown SSD backup {self.backup!r}; choose one of {BACKUPS}")

    @property
    def draft_len(self) -> int:
        """L (the fan-out has L + 1 entries)."""
        return len(self.fan_out) - 1

    @property
    def branches(self) -> int:
        """C, branches per row."""
        return sum(self.fan_out)

    @property
    def miss_fan_out(self) -> tuple[int, ...]:
        """The fan-out after a backup-served round."""
        return self.fan_out if self.fan_out_miss is None else self.fan_out_miss

    @property
    def max_fan_out(self) -> int:
        """The largest F_k after a hit or a miss: candidates drafted per position."""
        return max(max(self.fan_out), max(self.miss_fan_out))

    @property
    def top(self) -> int:
        """How many top tokens Saguaro scales."""
        return self.saguaro_top or self.max_fan_out

    def check_vocab(self, vocab_size: int) -> None:
        """Raises one ValueError, naming the knob (and its CLI key) and the fix, when the knobs
        cannot work with a draft of ``vocab_size`` (V) tokens: a fan-out entry above the bonus
        candidates there are (:func:`~specjax.decode.ssd.fanout.bonus_candidates`) or
        ``saguaro_top`` above V. Checked before any program is compiled (JAX's own error, from
        inside ``top_k``, names neither)."""
        for name, fans in (("fan_out", self.fan_out), ("fan_out_miss", self.miss_fan_out)):
            problem = fan_out_excess(fans, vocab_size)
            if problem:
                raise ValueError(
                    f"SSD {name} {fans}: {problem}; lower ssd_{name} entries (or ssd_budget)"
                )
        if self.saguaro_top > vocab_size:
            raise ValueError(
                f"SSD saguaro_top = {self.saguaro_top} exceeds the draft's vocabulary "
                f"V = {vocab_size}; set ssd_saguaro_top in [0, {vocab_size}]"
            )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpeculationCache:
    """Round t+1's speculations for the guessed outcomes of round t.

    Attributes:
      k_of: int32 ``[B, C]`` the accepted length each branch guesses (-1: empty).
      bonus: int32 ``[B, C]`` the bonus token each branch guesses.
      tokens: int32 ``[B, C, L]`` the branch's speculation.
      probs: float32 ``[B, C, L, V]`` the exact law each token was drawn from (q').
    """

    k_of: Array
    bonus: Array
    tokens: Array
    probs: Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Outcome:
    """What verification tells the draft (the only data sent back to the draft devices).

    Attributes:
      tau: int32 ``[B]`` accepted draft tokens (-1 before the first round).
      next_token: int32 ``[B]`` the bonus / correction token (the last committed token).
      lengths: int32 ``[B]`` committed tokens per row.
      done: bool ``[B]``.
    """

    tau: Array
    next_token: Array
    lengths: Array
    done: Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SSDStats:
    """Per-row SSD counters (int32 ``[B]`` each), over rounds while the row was active.

    Attributes:
      rounds: rounds whose outcome is known.
      cached: rounds that had a speculation cache to look the outcome up in (all but the first).
      hits: cached rounds whose outcome (k, b) was in the cache.
      covered: cached rounds whose k had a fan-out F_k > 0 (the bonus guess was tried).
      from_cache: rounds whose speculation was served from the cache.
      tau_from_cache: accepted tokens summed over rounds served from the cache.
      tau_from_backup: accepted tokens summed over rounds served by a backup.
    """

    rounds: Array
    cached: Array
    hits: Array
    covered: Array
    from_cache: Array
    tau_from_cache: Array
    tau_from_backup: Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SSDDraftState:
    """Everything on the draft devices between rounds.

    Attributes:
      kv: the draft :class:`KVCache` (committed tokens but the last; glue and branches past it).
      cache: the :class:`SpeculationCache` built for the current round's outcome.
      tokens: int32 ``[B, U]`` committed tokens as the draft knows them.
      lengths: int32 ``[B]``; done: bool ``[B]``.
      served: the :class:`Draft` (K = 1) being verified this round.
      source: int32 ``[B]`` where ``served`` came from (FROM_CACHE, FROM_JIT, FROM_FAST).
      keys: per-row PRNG keys ``[B]`` of the draft (independent of the verifier's).
      stats: the :class:`SSDStats`.
    """

    kv: KVCache
    cache: SpeculationCache
    tokens: Array
    lengths: Array
    done: Array
    served: Draft
    source: Array
    keys: PRNGKey
    stats: SSDStats

    def replace(self, **changes) -> SSDDraftState:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)
