"""The n-gram (prompt-lookup) drafter: copy what followed the last occurrence of the context's
final n tokens.

Deterministic: each draft token has a one-hot draft distribution, so every verifier accepts it
with probability ``p(token)`` (token verification) and never changes the output law. The draft
length varies per row: as many tokens (up to L) as followed the match; 0 when nothing matches.

With ``num_paths = K > 1`` it proposes the continuations of the K best distinct matches (longest
suffix first, then most recent), verified as a tree by ``specinfer`` (recursive rejection
sampling tries each proposal against the residual, so at temperature 0 it accepts exactly the
target's argmax). Such paths are fixed proposals, not i.i.d. draft samples, and paths sharing a
prefix may propose different next tokens, so :func:`specjax.decode.prepare` refuses them at
temperature > 0 and with the verifiers built for i.i.d. paths (GBV, SpecTr: GBV did accept a
non-argmax token on such a tree in testing).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.drafters.base import Draft, DrafterBase, check_types
from specjax.typing import Array, PRNGKey


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class NgramDrafter(DrafterBase):
    """Prompt-lookup drafting over the row's own tokens (prompt and generated text).

    ``NgramDrafter(vocab_size, *, num_paths=1, draft_len=4, max_ngram=3, min_ngram=1,
    hint_ngram=3, replacement=True)``: every argument after ``vocab_size`` is keyword-only (the
    order every drafter shares).

    Attributes:
      vocab_size: V of the target.
      num_paths: K, the best distinct matches proposed (K > 1: ``specinfer`` at temperature 0).
      draft_len: L, the most tokens proposed per step.
      max_ngram: longest suffix tried first.
      min_ngram: shortest suffix tried.
      hint_ngram: the shortest match the width controller counts as a proposal (:meth:`hint`;
        at most ``max_ngram``). A drafting step still proposes shorter ones, but only longer
        matches make the controller draft: on SmolLM2's greedy answers to 14 chat prompts a
        1-gram match's first token was right 15% of the time, a 2-gram's 41%, a 3-gram's 85%
        (docs/adaptive_width.md, "n-gram matches").
      replacement: what the ``specinfer`` verifier is told about sibling paths (the matches are
        fixed proposals, exact at temperature 0 either way).
    """

    vocab_size: int = dataclasses.field(metadata=dict(static=True))
    _: dataclasses.KW_ONLY
    num_paths: int = dataclasses.field(default=1, metadata=dict(static=True))
    draft_len: int = dataclasses.field(default=4, metadata=dict(static=True))
    max_ngram: int = dataclasses.field(default=3, metadata=dict(static=True))
    min_ngram: int = dataclasses.field(default=1, metadata=dict(static=True))
    hint_ngram: int = dataclasses.field(default=3, metadata=dict(static=True))
    replacement: bool = dataclasses.field(default=True, metadata=dict(static=True))

    def __post_init__(self):
        check_types(
            self,
            sampled=False,
            vocab_size=self.vocab_size,
            num_paths=self.num_paths,
            draft_len=self.draft_len,
            max_ngram=self.max_ngram,
            min_ngram=self.min_ngram,
            hint_ngram=self.hint_ngram,
        )
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size must be the target's V >= 1, got {self.vocab_size}")
        if self.num_paths < 1:
            raise ValueError(f"num_paths must be >= 1, got {self.num_paths}")
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(
                f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}"
            )
        if self.hint_ngram < 1:
            raise ValueError(f"hint_ngram must be >= 1, got {self.hint_ngram}")
        if self.draft_len < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {self.draft_len}")

    max_seq_len = None  # no model, no limit of its own
    tensor_parallel = False  # no weights
    sampled = False  # fixed proposals (one-hot laws)
    free_look = True  # hint() knows the first proposed token

    @property
    def greedy_only(self) -> bool:
        """Whether the paths are exact at temperature 0 only (K > 1: fixed, not i.i.d.)."""
        return self.num_paths > 1

    def init(self, prompts: Array, prompt_lengths: Array, capacity: int) -> tuple:
        """No state: the drafter reads the token buffer."""
        del prompts, prompt_lengths, capacity
        return ()

    def propose(
        self, state: tuple, keys: PRNGKey, tokens: Array, lengths: Array
    ) -> tuple[Draft, tuple]:
        """Drafts up to L tokens per row; ``tokens [B, U]``, ``lengths [B]``."""
        del keys
        draft, _ = self._matches(tokens, lengths)
        return draft, state

    def _matches(self, tokens: Array, lengths: Array) -> tuple[Draft, Array]:
        """``(draft, n [B, K])``: the proposals and the length of each path's match."""
        s_cap = tokens.shape[1]
        l_len, k_paths = self.draft_len, self.num_paths
        # best[b, p]: the longest n whose n-gram ending just before p matches the row's final
        # n tokens (0: none), for every continuation start p < lengths[b].
        best = jnp.zeros(tokens.shape, jnp.int32)  # [B, U]
        for n in range(self.min_ngram, self.max_ngram + 1):
            if n >= s_cap:
                continue
            tail = jnp.clip(lengths[:, None] - n + jnp.arange(n)[None, :], 0, s_cap - 1)
            suffix = jnp.take_along_axis(tokens, tail, axis=1)  # [B, n]
            windows = jnp.stack([tokens[:, j : s_cap - n + 1 + j] for j in range(n)], -1)
            match = jnp.all(windows == suffix[:, None, :], axis=-1)  # [B, U - n + 1]
            s = jnp.arange(s_cap - n + 1)[None, :]
            ok = match & (s + n < lengths[:, None]) & (lengths[:, None] >= n)
            ok = jnp.pad(ok, ((0, 0), (n, 0)))[:, :s_cap]  # indexed by start p = s + n
            best = jnp.where(ok, n, best)
        p = jnp.arange(s_cap)[None, :]
        score = jnp.where(best > 0, best * s_cap + p, -1)  # longest, then most recent
        top, start = jax.lax.top_k(score, k_paths)  # [B, K]
        num = jnp.where(top >= 0, jnp.minimum(l_len, lengths[:, None] - start), 0)
        num = num.astype(jnp.int32)
        pos = jnp.arange(l_len)[None, None, :]
        idx = jnp.clip(start[..., None] + pos, 0, s_cap - 1).reshape(-1, k_paths * l_len)
        copied = jnp.take_along_axis(tokens, idx, axis=1).reshape(-1, k_paths, l_len)
        draft = jnp.where(pos < num[..., None], copied, -1)  # [B, K, L]
        probs = jax.nn.one_hot(jnp.maximum(draft, 0), self.vocab_size, dtype=jnp.float32)
        return Draft(draft, probs, num), jnp.maximum(top, 0) // s_cap

    def commit(self, before, after, lengths, path, num_accepted, active) -> tuple:
        """Nothing to keep."""
        return after

    def hint(self, tokens: Array, lengths: Array) -> tuple[Array, Array]:
        """``(tokens the best path would propose [B], its first token [B])``, before drafting
        (the adaptive step's width choice reads them): 0 tokens where no match is
        ``hint_ngram`` tokens long."""
        draft, n = self._matches(tokens, lengths)
        counted = n >= min(self.hint_ngram, self.max_ngram)  # [B, K] long enough to trust
        num = jnp.where(counted, draft.num_draft, 0)  # [B, K]
        return jnp.max(num, axis=1), draft.tokens[:, 0, 0]

    def skip(self, state: tuple, tokens, lengths, active) -> tuple:
        """A step without a draft: nothing to keep."""
        return state
