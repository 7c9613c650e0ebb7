"""The feature drafter: K paths of L tokens from an EAGLE-class head reading the target's hidden
states (:mod:`specjax.models.eagle`).

Draft position t holds the pair (g_{t-1}, x_t): the target's features of position t - 1 (zero
for t = 0) and the token at t. The target returns its features for every token it scores in the
same forward (prefill and the verification tree), and hands the root's and the accepted path's to
:meth:`FeatureDrafter.commit`; they wait in the state as *pending* pairs until the next
:meth:`propose` feeds them (at most L + 1 per step). Invariant between steps: the head's cache
holds ``c`` pairs and ``n_p`` are pending with ``c + n_p`` = the committed length.

Proposing feeds the pending pairs, samples the root children from the last one's law, then grows
all K paths one depth per call, each feeding its parent's own output h as g (tree attention as
:class:`~specjax.drafters.ModelDrafter`). Each token is drawn from the head's processed law over
its W-id draft vocabulary; that law scattered into the V-vector (zeros outside the draft
vocabulary) is exactly the law reported to the verifier. With ``top_paths`` the K paths are
fixed proposals instead: the head's K most likely root children, then its argmax, each reported
as the point mass at its token (docs/feature_drafter.md, "Top paths").
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from specjax import sampling, tree
from specjax.drafters.base import Draft, DrafterBase, check_types
from specjax.models.cache import KVCache
from specjax.models.eagle import EagleConfig, EagleHead
from specjax.models.pure import PureModel
from specjax.typing import Array, PRNGKey


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FeatureState:
    """The feature drafter's state.

    Attributes:
      cache: the head's one-layer :class:`KVCache` (pairs fed so far).
      pending: float32 ``[B, L + 1, A, D]`` target features of the pairs not yet fed; pair i
        sits at position ``cache.lengths + i``.
      num_pending: int32 ``[B]`` (>= 1 between steps).
    """

    cache: KVCache
    pending: Array
    num_pending: Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FeatureDrafter(DrafterBase):
    """Drafts with an :class:`EagleHead` on the target's features.

    ``FeatureDrafter(head, *, num_paths=1, draft_len=4, sampling, top_paths=False)``: every
    argument after the head is keyword-only (the order every drafter shares).

    Attributes:
      head: the head (a :class:`PureModel` of it, or the module, split on construction).
      num_paths: K (i.i.d. paths, or the head's top choices with ``top_paths``).
      draft_len: L.
      sampling: the :class:`~specjax.sampling.SamplingParams` (same as the target's).
      top_paths: False: every token is drawn from the head's processed law. True: fixed
        proposals (EAGLE-2's branching at the root): path k starts with the head's k-th most
        likely draft token and goes on with its most likely one at every depth; each law
        reported is the point mass at its token. With K > 1 the paths are not i.i.d., so they
        are exact at temperature 0 only (``specinfer``), as the n-gram drafter's.
      coupled: tokens are the Gumbel-max draws of the noise the target's are drawn with, as
        :class:`~specjax.drafters.ModelDrafter`'s (the ``gumbel`` verifier; set by the loop).
    """

    head: PureModel
    _: dataclasses.KW_ONLY
    num_paths: int = dataclasses.field(default=1, metadata=dict(static=True))
    draft_len: int = dataclasses.field(default=4, metadata=dict(static=True))
    sampling: sampling.SamplingParams = dataclasses.field(metadata=dict(static=True))
    top_paths: bool = dataclasses.field(default=False, metadata=dict(static=True))
    coupled: bool = dataclasses.field(default=False, metadata=dict(static=True))

    def __post_init__(self):
        if isinstance(self.head, EagleHead):
            object.__setattr__(self, "head", PureModel(*nnx.split(self.head)))
        if not isinstance(self.head, PureModel) or not isinstance(self.head.config, EagleConfig):
            raise TypeError(
                "FeatureDrafter: head must be an EagleHead "
                f"(specjax.models.eagle_formats.load_head), got {type(self.head).__name__}"
            )
        check_types(self, num_paths=self.num_paths, draft_len=self.draft_len)
        if self.num_paths < 1 or self.draft_len < 1:
            raise ValueError(
                f"need num_paths >= 1 and num_speculative_tokens >= 1, got {self.num_paths} "
                f"and {self.draft_len}"
            )
        if self.top_paths and self.num_paths > self.head.config.draft_vocab:
            raise ValueError(
                f"top_paths: num_paths {self.num_paths} exceeds the head's draft vocabulary "
                f"of {self.head.config.draft_vocab} ids; lower num_paths"
            )

    replacement = True  # the K paths are i.i.d. (or fixed: greedy_only)

    @property
    def greedy_only(self) -> bool:
        """Whether the paths are exact at temperature 0 only (``top_paths`` with K > 1: fixed
        proposals, not i.i.d.). Sampled paths are exact at any temperature."""
        return self.top_paths and self.num_paths > 1

    tensor_parallel = False  # the head is small: replicated on a mesh
    coupleable = True  # (coupled)

    @property
    def vocab_size(self) -> int:
        """V (the target's)."""
        return self.head.config.vocab_size

    @property
    def max_seq_len(self) -> int:
        """The head's longest sequence."""
        return self.head.config.max_seq_len

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The target blocks whose outputs the head reads (the target returns them)."""
        return self.head.config.feature_layers

    def _law(self, logits: Array) -> tuple[Array, Array]:
        """``(law over W [..., W], the same law scattered into V [..., V])``."""
        q_w = sampling.probs_from_logits(logits, self.sampling)
        d2t = self.head.module.d2t[...]
        full = jnp.zeros((*q_w.shape[:-1], self.vocab_size), jnp.float32)
        return q_w, full.at[..., d2t].set(q_w)

    def _point_masses(self, tokens: Array, logits: Array) -> Array:
        """``[..., V]``: the point masses at ``tokens [...]`` (target ids) that ``top_paths``
        reports, NaN where the head's ``logits [..., W]`` (broadcast against ``tokens``) are not
        finite (a broken head's law ends the path, as a sampled law with a NaN does)."""
        ok = jnp.all(jnp.isfinite(logits), axis=-1)[..., None]  # [..., 1]
        return jnp.where(ok, jax.nn.one_hot(tokens, self.vocab_size, dtype=jnp.float32), jnp.nan)

    def init(self, prompts: Array, prompt_lengths: Array, capacity: int, *, features: Array):
        """The state after the prompts ``[B, T]``, given the target's prefill features
        ``[B, T - 1, A, D]`` (of every prompt token but the last)."""
        head = self.head.module
        b, t = prompts.shape
        shifted = jnp.concatenate(
            [jnp.zeros((b, 1, *features.shape[2:]), jnp.float32), features.astype(jnp.float32)],
            axis=1,
        )  # [B, T, A, D]: pair t's feature is g_{t-1}
        cache = KVCache.init(head.config, b, capacity)
        if t > 1:
            _, _, cache = head(head.fuse(shifted[:, : t - 1]), prompts[:, : t - 1], cache=cache)
        lengths = jnp.asarray(prompt_lengths, jnp.int32)
        last = jnp.take_along_axis(shifted, (lengths - 1)[:, None, None, None], axis=1)
        pending = jnp.zeros((b, self.draft_len + 1, *features.shape[2:]), jnp.float32)
        return FeatureState(
            cache.rollback(lengths - 1),
            pending.at[:, 0].set(last[:, 0]),
            jnp.ones((b,), jnp.int32),
        )

    def _feed(self, state: FeatureState, tokens: Array) -> tuple[Array, Array, KVCache]:
        """Feeds the pending pairs: ``(h [B, D], logits [B, W], cache)``, the outputs of the
        last pending pair (the root of the next draft), the cache then holding every committed
        position (of the L + 1 pending slots, ``num_pending``)."""
        head = self.head.module
        seen = state.cache.lengths
        span = jnp.arange(state.pending.shape[1])[None, :]
        idx = jnp.clip(seen[:, None] + span, 0, tokens.shape[1] - 1)
        h, logits, cache = head(
            head.fuse(state.pending),
            jnp.take_along_axis(tokens, idx, axis=1),
            cache=state.cache,
            last=jnp.maximum(state.num_pending - 1, 0),
        )
        return h[:, 0], logits[:, 0], cache.rollback(seen + state.num_pending)

    def propose(
        self, state: FeatureState, keys: PRNGKey, tokens: Array, lengths: Array
    ) -> tuple[Draft, FeatureState]:
        """Drafts K paths of L tokens after ``tokens[b, :lengths[b]]`` (``tokens [B, U]``)."""
        head = self.head.module
        k_paths, l_len = self.num_paths, self.draft_len
        b = lengths.shape[0]
        h_root, root, cache = self._feed(state, tokens)  # [B, D], [B, W]
        d2t = head.d2t[...]
        step_keys = jax.vmap(lambda k: jax.random.split(k, l_len))(keys)  # [B, L]
        if self.top_paths:
            first = d2t[jax.lax.top_k(root, k_paths)[1]]  # [B, K]
            q = self._point_masses(first, root[:, None])  # [B, K, V]
        else:
            q_w, q = self._law(root)  # [B, W], [B, V]
            q_b = jnp.broadcast_to(q_w[:, None], (b, k_paths, q_w.shape[-1]))
            k0 = keys if self.coupled else step_keys[:, 0]
            v = self.vocab_size
            first = d2t[sampling.draw(k0, q_b, lengths, self.coupled, v, d2t)]  # [B, K]
            q = jnp.broadcast_to(q[:, None], (b, k_paths, q.shape[-1]))
        draft = jnp.zeros((b, k_paths, l_len), jnp.int32).at[:, :, 0].set(first)
        probs = jnp.zeros((b, k_paths, l_len, q.shape[-1]), jnp.float32)  # [B, K, L, V]
        probs = probs.at[:, :, 0].set(q)
        g = jnp.broadcast_to(h_root[:, None], (b, k_paths, h_root.shape[-1]))  # [B, K, D]

        def grow(depth, carry):  # feed depth-1 tokens with their parents' outputs, sample depth
            cache, draft, probs, g = carry
            kv_mask = tree.draft_kv_mask(lengths, depth, k_paths)  # own path and prefix
            positions = jnp.broadcast_to((lengths + depth - 1)[:, None], (b, k_paths))
            h, logits, cache = head(
                g, draft[:, :, depth - 1], cache=cache, positions=positions, kv_mask=kv_mask
            )
            if self.top_paths:
                x = d2t[jnp.argmax(logits, axis=-1)]  # [B, K]
                q = self._point_masses(x, logits)  # [B, K, V]
            else:
                q_w, q = self._law(logits)  # [B, K, W], [B, K, V]
                keys_d = keys if self.coupled else jax.vmap(lambda ks: ks[depth])(step_keys)
                pos = lengths + depth
                x = d2t[sampling.draw(keys_d, q_w, pos, self.coupled, self.vocab_size, d2t)]
            return cache, draft.at[:, :, depth].set(x), probs.at[:, :, depth].set(q), h

        # Unrolled over the static depths: a loop in the step splits its GPU graph.
        carry = (cache, draft, probs, g)
        cache, draft, probs, _ = jax.lax.fori_loop(1, l_len, grow, carry, unroll=True)
        num_draft = jnp.full((b, k_paths), l_len, jnp.int32)
        return Draft(draft, probs, num_draft), dataclasses.replace(state, cache=cache)

    def commit(
        self,
        before: FeatureState,
        after: FeatureState,
        lengths: Array,
        path: Array,
        num_accepted: Array,
        active: Array,
        *,
        features: Array,
    ) -> FeatureState:
        """Keeps the fed pairs (up to ``lengths``) and makes the root's and the accepted path's
        target features ``features [B, L + 1, A, D]`` the next pending pairs."""
        del path  # the features already follow the accepted path
        cache = after.cache.rollback(jnp.where(active, lengths, before.cache.lengths))
        keep = active[:, None, None, None]
        slots = before.pending.shape[1]  # L + 1 of the full-width drafter (this one: maybe less)
        features = jnp.pad(
            features.astype(jnp.float32), ((0, 0), (0, slots - features.shape[1]), (0, 0), (0, 0))
        )
        return FeatureState(
            cache,
            jnp.where(keep, features, before.pending),
            jnp.where(active, num_accepted + 1, before.num_pending).astype(jnp.int32),
        )

    def skip(
        self, state: FeatureState, tokens: Array, lengths: Array, active: Array, *, features: Array
    ) -> FeatureState:
        """A step without a draft that committed one token per active row: its pair (the fed
        token's target features ``features [B, 1, A, D]``, the new token) becomes pending. When
        a row's pending slots are full, the pending pairs are fed first (one head forward)."""
        del lengths
        full = jnp.any(active & (state.num_pending >= state.pending.shape[1]))
        flushed = lambda s: FeatureState(
            self._feed(s, tokens)[2], s.pending, jnp.zeros_like(s.num_pending)
        )
        state = jax.lax.cond(full, flushed, lambda s: s, state)
        # slot [B, L + 1]: each row's next pending slot
        slot = jnp.arange(state.pending.shape[1])[None, :] == state.num_pending[:, None]
        keep = (active[:, None] & slot)[:, :, None, None]
        return FeatureState(
            state.cache,
            jnp.where(keep, features.astype(jnp.float32), state.pending),
            jnp.where(active, state.num_pending + 1, state.num_pending).astype(jnp.int32),
        )
