"""The small-model drafter: K paths of L tokens sampled from a draft Llama, grown as a tree.

Per step it feeds the one or two tokens it has not yet seen (the last committed token, and the
last draft token when a whole path was accepted), samples the K root children (i.i.d. or without
replacement), then grows all K paths one depth per call with tree attention (``specjax.tree``).
The returned ``probs`` are exactly the processed laws the tokens were drawn from.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax import sampling, sharding, tree
from specjax.drafters.base import Draft, DrafterBase, check_types
from specjax.models.cache import KVCache
from specjax.models.decoder import Decoder
from specjax.models.pure import PureModel, as_pure, prefill
from specjax.typing import Array, PRNGKey

CATCH_UP = 32
"""Tokens per forward while the draft cache is far behind (:meth:`ModelDrafter.catch_up`)."""

CATCH_UP_LONG = 256
"""Tokens per forward while the cache misses more than this: a prompt the draft has not read
(:meth:`ModelDrafter.init` with ``lazy``), caught up in a few long forwards, not many short ones."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ModelDrafter(DrafterBase):
    """Drafts with a small Llama sharing the target's tokenizer.

    ``ModelDrafter(model, *, num_paths=1, draft_len=4, sampling, replacement=True)``: every
    argument after the model is keyword-only (the order every drafter shares).

    Attributes:
      model: the draft model (:class:`PureModel`, or a :class:`Decoder` as loaded, split on
        construction; its weights are pytree leaves).
      num_paths: K.
      draft_len: L.
      sampling: the :class:`~specjax.sampling.SamplingParams` (same as the target's).
      replacement: True: the K paths are i.i.d.; False: the K root children are drawn without
        replacement in path order (deeper nodes have no siblings then), which only the
        ``specinfer`` verifier verifies (it is told this drafter's ``replacement``).
      far_behind: whether the cache may miss more than the last L + 3 committed tokens when
        :meth:`propose` is called: after a lazy :meth:`init` or width-0 steps, which happen only
        with 0 among ``DecodeConfig.widths``. True (the default): :meth:`catch_up` loops until
        caught up. False: one bounded feed, no loop in the step. The decoding step sets it
        (:func:`~specjax.drafters.base.near`).
      coupled: the token at position n is the Gumbel-max draw of the noise the target's token
        at n is drawn with (the keys :meth:`propose` receives are the rows' noise keys: the
        ``gumbel`` verifier; :func:`specjax.sampling.draw`); set by the decoding loop.
    """

    model: PureModel
    _: dataclasses.KW_ONLY
    num_paths: int = dataclasses.field(default=1, metadata=dict(static=True))
    draft_len: int = dataclasses.field(default=4, metadata=dict(static=True))
    sampling: sampling.SamplingParams = dataclasses.field(metadata=dict(static=True))
    replacement: bool = dataclasses.field(default=True, metadata=dict(static=True))
    far_behind: bool = dataclasses.field(default=True, metadata=dict(static=True))
    coupled: bool = dataclasses.field(default=False, metadata=dict(static=True))

    def __post_init__(self):
        if isinstance(self.model, Decoder):  # a model as loaded: split it (nothing copied)
            object.__setattr__(self, "model", as_pure(self.model))
        if not isinstance(self.model, PureModel):
            raise TypeError(f"ModelDrafter: model must be a Llama or PureModel, got {self.model!r}")
        check_types(self, num_paths=self.num_paths, draft_len=self.draft_len)
        if self.num_paths < 1 or self.draft_len < 1:
            raise ValueError(
                f"need num_paths >= 1 and num_speculative_tokens >= 1, got {self.num_paths} "
                f"and {self.draft_len}"
            )
        if not self.replacement and self.num_paths > self.model.config.vocab_size:
            raise ValueError("num_paths exceeds the vocabulary: cannot draw without replacement")

    @property
    def vocab_size(self) -> int:
        """V of the draft model (must equal the target's)."""
        return self.model.config.vocab_size

    @property
    def max_seq_len(self) -> int:
        """The draft model's longest sequence."""
        return self.model.config.max_seq_len

    greedy_only = False  # sampled paths: exact at any temperature
    coupleable = True  # (coupled)
    idle_catch_up = True  # after width-0 steps the next draft feeds what it missed (catch_up)

    @property
    def tensor_parallel(self) -> bool:
        """Whether the draft's weights are split over a mesh (else replicated)."""
        return sharding.is_split(self.model.state)

    def init(
        self, prompts: Array, prompt_lengths: Array, capacity: int, *, lazy: bool = False
    ) -> KVCache:
        """The draft cache of every prompt but its last token.

        Args:
          prompts: int ``[B, T]`` right-padded prompts; prompt_lengths: int ``[B]``.
          capacity: S of the cache.
          lazy: return an empty cache instead: the first :meth:`propose` reads the prompt
            (:meth:`catch_up`). A generation whose steps never draft (width 0 throughout,
            ``DecodeConfig.widths``) then never runs the draft at all.
        """
        if lazy:
            return KVCache.init(self.model.config, prompts.shape[0], capacity)
        return prefill(self.model, prompts, prompt_lengths, capacity)

    def propose(
        self, state: KVCache, keys: PRNGKey, tokens: Array, lengths: Array
    ) -> tuple[Draft, KVCache]:
        """Drafts K paths of L tokens after ``tokens[b, :lengths[b]]``.

        Args:
          state: the draft cache; it holds all but the last one or more committed tokens (more
            after steps that skipped drafting: :meth:`catch_up` feeds them first).
          keys: per-row PRNG keys ``[B]``.
          tokens: int ``[B, U]`` token buffer.
          lengths: int ``[B]`` committed tokens per row.

        Returns:
          The :class:`Draft` and the cache holding the root and the tree's inner nodes.
        """
        k_paths, l_len = self.num_paths, self.draft_len
        b = lengths.shape[0]
        cache = self.catch_up(state, tokens, lengths)
        seen = cache.lengths
        unseen = lengths - seen  # [B] 1 or 2
        idx = jnp.clip(seen[:, None] + jnp.arange(2)[None, :], 0, tokens.shape[1] - 1)
        logits, cache, _ = self.model(jnp.take_along_axis(tokens, idx, axis=1), cache=cache)
        cache = cache.rollback(lengths)  # drop the padding token of rows with one unseen
        root = jnp.take_along_axis(logits, (unseen - 1)[:, None, None], axis=1)[:, 0]  # [B, V]
        q_root = sampling.probs_from_logits(root, self.sampling)  # [B, V]
        step_keys = jax.vmap(lambda k: jax.random.split(k, l_len))(keys)  # [B, L]
        if self.replacement:
            q_b = jnp.broadcast_to(q_root[:, None], (b, k_paths, q_root.shape[-1]))
            k0 = keys if self.coupled else step_keys[:, 0]
            first = sampling.draw(k0, q_b, lengths, self.coupled)  # [B, K]
            valid = jnp.ones((b, k_paths), bool)
        else:
            draw = lambda k, q: sampling.sample_without_replacement(k, q, k_paths)
            first, valid = jax.vmap(draw)(step_keys[:, 0], q_root)
        draft = jnp.zeros((b, k_paths, l_len), jnp.int32).at[:, :, 0].set(first)  # [B, K, L]
        probs = jnp.zeros((b, k_paths, l_len, q_root.shape[-1]), jnp.float32)  # [B, K, L, V]
        probs = probs.at[:, :, 0].set(q_root[:, None])

        def grow(depth, carry):  # feed depth-1 tokens, sample depth
            cache, draft, probs = carry
            kv_mask = tree.draft_kv_mask(lengths, depth, k_paths)  # own path and prefix
            positions = jnp.broadcast_to((lengths + depth - 1)[:, None], (b, k_paths))
            logits, cache, _ = self.model(
                draft[:, :, depth - 1], cache=cache, positions=positions, kv_mask=kv_mask
            )
            q = sampling.probs_from_logits(logits, self.sampling)  # [B, K, V]
            keys_d = keys if self.coupled else jax.vmap(lambda ks: ks[depth])(step_keys)  # [B]
            x = sampling.draw(keys_d, q, lengths + depth, self.coupled)  # [B, K]
            return cache, draft.at[:, :, depth].set(x), probs.at[:, :, depth].set(q)

        # A chain is unrolled over its static depths (a loop in the step splits its GPU graph).
        # TODO(loops): a tree (K > 1) keeps its loop: unrolled, XLA copied the whole draft KV
        # cache 4 times per step (tests/test_cache_slots.py saw the bytes grow with capacity).
        carry = (cache, draft, probs)
        unroll = k_paths == 1
        cache, draft, probs = jax.lax.fori_loop(1, l_len, grow, carry, unroll=unroll)
        num_draft = jnp.where(valid, l_len, 0).astype(jnp.int32)
        return Draft(draft, probs, num_draft), cache

    def catch_up(self, cache: KVCache, tokens: Array, lengths: Array) -> KVCache:
        """Feeds committed tokens the cache has not seen until it misses at most the last two
        (what :meth:`propose` feeds itself); no forward when none misses more.

        Without :attr:`far_behind` a row misses at most L + 3 (after a step it misses one or
        two): one forward of L + 1 tokens, under a ``lax.cond``, suffices, and the step has no
        loop (on GPU a loop splits the step's CUDA graph and a data-dependent one syncs with
        the host). With it: while a row misses more than :data:`CATCH_UP_LONG` + 2 (a prompt a
        lazy :meth:`init` left unread) the forwards take that many tokens; while one misses
        more than L + 3 (after a run of width-0 steps) they take :data:`CATCH_UP` (a row
        missing fewer is fed what it misses), then at most one takes L + 1: a small draft's
        forward costs about the same for 5 tokens as for 32. One loop per chunk size (one loop
        choosing its chunk by ``lax.switch`` made XLA copy the caches around its branches).
        The bounded feed is the loops' last, so the tokens do not depend on
        :attr:`far_behind`.

        Args:
          cache: the draft cache; tokens: int ``[B, U]``; lengths: int ``[B]`` committed tokens.
        """

        def feed(chunk: int):
            span = jnp.arange(chunk)[None, :]

            def run(cache):
                idx = jnp.clip(cache.lengths[:, None] + span, 0, tokens.shape[1] - 1)
                _, fed, _ = self.model(jnp.take_along_axis(tokens, idx, axis=1), cache=cache)
                return fed.rollback(jnp.minimum(cache.lengths + chunk, lengths - 1))

            return run

        behind = lambda ahead: lambda cache: jnp.any(lengths - cache.lengths > 2 + ahead)
        small, big = self.draft_len + 1, min(CATCH_UP, cache.capacity)
        if not self.far_behind:
            return jax.lax.cond(behind(0)(cache), feed(small), lambda c: c, cache)
        # TODO(loops): catch up where a run of width-0 steps ends (decode_program's idle runs)
        # instead, so that the drafting widths' steps have no loop either.
        if cache.capacity > CATCH_UP_LONG + 2:  # (else no row can miss that many)
            cache = jax.lax.while_loop(behind(CATCH_UP_LONG), feed(CATCH_UP_LONG), cache)
        if big > small:  # big chunks (clipped to what is missing) until one small one is left
            cache = jax.lax.while_loop(behind(small), feed(big), cache)
        return jax.lax.while_loop(behind(0), feed(small), cache)

    def skip(self, state: KVCache, tokens: Array, lengths: Array, active: Array) -> KVCache:
        """A step without a draft: nothing fed now (the next :meth:`propose` catches up)."""
        return state

    def commit(
        self,
        before: KVCache,
        after: KVCache,
        lengths: Array,
        path: Array,
        num_accepted: Array,
        active: Array,
    ) -> KVCache:
        """Keeps the root and the accepted path's fed nodes (at most L - 1 of them)."""
        keep = jnp.where(active, jnp.minimum(num_accepted, self.draft_len - 1), 0)
        if self.num_paths > 1:
            sources = tree.draft_path_slots(lengths, path, self.num_paths, self.draft_len)
            cache = after.compact(lengths, sources, keep)
        else:  # a chain's fed nodes already sit right after the root
            cache = after.rollback(lengths + keep)
        # Done rows keep the committed tokens propose fed (all of them but the last).
        done_rows = jnp.maximum(before.lengths, lengths - 1)
        return cache.rollback(jnp.where(active, cache.lengths, done_rows))
