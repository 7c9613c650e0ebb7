"""The decoding state: one frozen pytree carried through every step and the while loop."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from specjax.models.cache import KVCache
from specjax.typing import Array, PRNGKey


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeState:
    """Everything a step reads and writes (shapes static for a whole generation).

    Attributes:
      tokens: int32 ``[B, S]`` prompt and generated tokens; ``tokens[b, :lengths[b]]`` is row
        b's sequence, the rest is scratch.
      lengths: int32 ``[B]`` committed tokens per row (the last one is not yet in the target
        cache: the next step feeds it).
      prompt_lengths: int32 ``[B]``.
      done: bool ``[B]`` rows that reached a stop token or ``max_new_tokens``.
      target_cache: the target's :class:`KVCache` (``lengths - 1`` entries per row).
      draft_state: the drafter's state (a draft cache, or ``()``).
      keys: per-row PRNG keys ``[B]`` (rows never share randomness).
      steps: int32 ``[B]`` target forwards while the row was active.
      accepted: int32 ``[B]`` accepted draft tokens.
      proposed: int32 ``[B]`` draft tokens proposed on the followed path.
      histogram: int32 ``[B, L + 1]`` steps by accepted length tau.
      position_accepted: int32 ``[B, L]`` steps whose draft position i was accepted.
      position_proposed: int32 ``[B, L]`` steps whose draft position i was proposed.
      last_accepted: int32 ``[B]`` tau of the latest step (-1 for inactive rows).
    """

    tokens: Array
    lengths: Array
    prompt_lengths: Array
    done: Array
    target_cache: KVCache
    draft_state: Any
    keys: PRNGKey
    steps: Array
    accepted: Array
    proposed: Array
    histogram: Array
    position_accepted: Array
    position_proposed: Array
    last_accepted: Array

    @property
    def batch(self) -> int:
        """B."""
        return self.tokens.shape[0]

    def replace(self, **changes) -> DecodeState:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)
