"""The n-gram (prompt-lookup) drafter: copy what followed the last occurrence of the context's
final n tokens.

Deterministic: each draft token has a one-hot draft distribution, so every verifier accepts it
with probability ``p(token)`` (token verification) and never changes the output law. The draft
length varies per row: as many tokens (up to L) as followed the match; 0 when nothing matches.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.drafters.base import Draft
from specjax.typing import Array, PRNGKey


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class NgramDrafter:
    """Prompt-lookup drafting over the row's own tokens (prompt and generated text).

    Attributes:
      vocab_size: V of the target.
      draft_len: L, the most tokens proposed per step.
      max_ngram: longest suffix tried first.
      min_ngram: shortest suffix tried.
    """

    vocab_size: int = dataclasses.field(metadata=dict(static=True))
    draft_len: int = dataclasses.field(default=4, metadata=dict(static=True))
    max_ngram: int = dataclasses.field(default=3, metadata=dict(static=True))
    min_ngram: int = dataclasses.field(default=1, metadata=dict(static=True))
    num_paths: int = dataclasses.field(default=1, metadata=dict(static=True))
    replacement: bool = dataclasses.field(default=True, metadata=dict(static=True))

    def __post_init__(self):
        if self.num_paths != 1:
            raise ValueError("the n-gram drafter proposes one chain; set num_paths=1")
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(
                f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}"
            )
        if self.draft_len < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {self.draft_len}")

    max_seq_len = None  # no model, no limit of its own

    def init(self, prompts: Array, prompt_lengths: Array, capacity: int) -> tuple:
        """No state: the drafter reads the token buffer."""
        del prompts, prompt_lengths, capacity
        return ()

    def propose(
        self, state: tuple, keys: PRNGKey, tokens: Array, lengths: Array
    ) -> tuple[Draft, tuple]:
        """Drafts up to L tokens per row; ``tokens [B, S]``, ``lengths [B]``."""
        del keys
        s_cap = tokens.shape[1]
        l_len = self.draft_len
        start = jnp.full(lengths.shape, -1, jnp.int32)  # where the copied continuation starts
        for n in range(self.max_ngram, self.min_ngram - 1, -1):  # longest match wins
            if n >= s_cap:
                continue
            tail = jnp.clip(lengths[:, None] - n + jnp.arange(n)[None, :], 0, s_cap - 1)
            suffix = jnp.take_along_axis(tokens, tail, axis=1)  # [B, n]
            windows = jnp.stack([tokens[:, j : s_cap - n + 1 + j] for j in range(n)], -1)
            match = jnp.all(windows == suffix[:, None, :], axis=-1)  # [B, S - n + 1]
            s = jnp.arange(s_cap - n + 1)[None, :]
            ok = match & (s + n < lengths[:, None]) & (lengths[:, None] >= n)
            last = jnp.max(jnp.where(ok, s, -1), axis=1)  # the most recent match
            start = jnp.where((start < 0) & (last >= 0), last + n, start)
        num = jnp.where(start >= 0, jnp.minimum(l_len, lengths - start), 0).astype(jnp.int32)
        pos = jnp.arange(l_len)[None, :]
        idx = jnp.clip(start[:, None] + pos, 0, s_cap - 1)
        draft = jnp.where(pos < num[:, None], jnp.take_along_axis(tokens, idx, axis=1), -1)
        probs = jax.nn.one_hot(jnp.maximum(draft, 0), self.vocab_size, dtype=jnp.float32)
        return Draft(draft[:, None], probs[:, None], num[:, None]), state

    def commit(self, before, after, lengths, path, num_accepted, active) -> tuple:
        """Nothing to keep."""
        return after
