"""The SSD (Saguaro) draft side: serve a speculation from the cache, build the next cache.

Speculative speculative decoding (Kumar, Dao, May; docs/ssd.md) takes drafting off the
critical path. While the target verifies round t's speculation ``x [B, L]``, the draft guesses the
outcome (k accepted tokens, bonus token b) and drafts round t+1's speculation for each guess:

* **build** (concurrent with verification): one causal *glue* call feeds the last committed token
  and ``x_1 .. x_L`` (L + 1 tokens) and gives the draft's law at every position; for each k the
  top-``F_k`` tokens there, the drafted ``x_{k+1}`` excluded (a rejected token has no residual
  mass, so it is never the bonus), become branch (k, b); all C branches then decode L tokens deep
  with tree attention, one call per depth. Each branch token is drawn from Saguaro's ``q'`` and
  that exact law is stored: the :class:`SpeculationCache`.
* **serve** (once the outcome is known): the branch whose key (k, b) equals the outcome is the
  next speculation; a row whose outcome was not guessed gets a backup: ``jit`` drafts it on the
  spot (L sequential calls, as plain SD would), ``ngram`` copies a prompt-lookup proposal with
  one-hot laws, ``none`` proposes nothing (the round emits one target token). Every backup hands
  the verifier the exact law its tokens were drawn from, so output stays the target's law.

The draft KV cache: after serve it holds every committed token but the last (as for
:class:`~specjax.drafters.ModelDrafter`). Build writes the glue right after it, then the C
branches' L levels (branch c at depth d in slot ``n + L + d * C + c``); serve keeps the glue
entries of the accepted tokens by moving the length forward, and discards the branch entries
(the next glue feeds the served tokens again).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax import sampling, tree
from specjax.buffers import append_rows
from specjax.decode.ssd.fanout import branch_layout
from specjax.decode.ssd.speculation import (
    FROM_CACHE,
    FROM_FAST,
    FROM_JIT,
    Outcome,
    SpeculationCache,
    SSDConfig,
    SSDDraftState,
    SSDStats,
)
from specjax.drafters.base import Draft, DrafterBase
from specjax.drafters.ngram import NgramDrafter
from specjax.models.cache import KVCache
from specjax.models.decoder import Decoder
from specjax.models.pure import PureModel, as_pure, prefill
from specjax.typing import Array, PRNGKey


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SSDDrafter(DrafterBase):
    """The SSD draft: a small Llama, the :class:`SSDConfig` and its sampling.

    ``SSDDrafter(model, *, ssd, sampling)``: keyword-only after the model, like every drafter
    (``ssd`` holds the shape, L and the fan-out, where the others take ``num_paths`` and
    ``draft_len``). It states the :class:`~specjax.drafters.base.Drafter` attributes the input
    checks read (one path of L tokens); the rounds call :meth:`init`, :meth:`serve` and
    :meth:`build`.
    """

    model: PureModel
    _: dataclasses.KW_ONLY
    ssd: SSDConfig = dataclasses.field(metadata=dict(static=True))
    sampling: sampling.SamplingParams = dataclasses.field(metadata=dict(static=True))

    def __post_init__(self):
        if isinstance(self.model, Decoder):  # a model as loaded: split it (nothing copied)
            object.__setattr__(self, "model", as_pure(self.model))

    num_paths = 1
    replacement = True
    greedy_only = False
    tensor_parallel = False  # the SSD draft runs on its own device(s), replicated

    @property
    def draft_len(self) -> int:
        """L."""
        return self.ssd.draft_len

    @property
    def vocab_size(self) -> int:
        """V of the draft model."""
        return self.model.config.vocab_size

    @property
    def max_seq_len(self) -> int:
        """Branches run up to L positions past the verified tree."""
        return self.model.config.max_seq_len - self.draft_len

    def scratch(self) -> int:
        """Draft-cache slots needed past the committed tokens: glue and C * L branch nodes."""
        return self.draft_len + 1 + self.ssd.branches * self.draft_len

    def init(self, prompts: Array, prompt_lengths: Array, key: PRNGKey, capacity: int, buffer: int):
        """The draft state after the prompts ``[B, T]`` (right-padded, lengths ``[B]``) and the
        outcome that makes the first :meth:`serve` draft every row with the backup."""
        b, t = prompts.shape
        l_len, c, v = self.draft_len, self.ssd.branches, self.vocab_size
        lengths = jnp.asarray(prompt_lengths, jnp.int32)
        zeros = jnp.zeros((b,), jnp.int32)
        state = SSDDraftState(
            kv=prefill(self.model, prompts, lengths, capacity + self.scratch()),
            cache=SpeculationCache(
                k_of=jnp.full((b, c), -1, jnp.int32),
                bonus=jnp.full((b, c), -1, jnp.int32),
                tokens=jnp.zeros((b, c, l_len), jnp.int32),
                probs=jnp.zeros((b, c, l_len, v), jnp.float32),
            ),
            tokens=jnp.zeros((b, buffer), jnp.int32).at[:, :t].set(prompts.astype(jnp.int32)),
            lengths=lengths,
            done=jnp.zeros((b,), bool),
            served=Draft(
                jnp.zeros((b, 1, l_len), jnp.int32),
                jnp.zeros((b, 1, l_len, v), jnp.float32),
                jnp.zeros((b, 1), jnp.int32),
            ),
            source=zeros + FROM_JIT,
            keys=sampling.row_keys(key, b),
            stats=SSDStats(*(zeros for _ in dataclasses.fields(SSDStats))),
        )
        last = jnp.take_along_axis(state.tokens, (lengths - 1)[:, None], axis=1)[:, 0]
        return state, Outcome(zeros - 1, last, lengths, jnp.zeros((b,), bool))

    def serve(self, state: SSDDraftState, outcome: Outcome) -> tuple[Draft, SSDDraftState]:
        """The speculation for the round after ``outcome``: the cached branch whose key matches,
        else the backup's. Only rows with ``~outcome.done`` change."""
        b, l_len = state.lengths.shape[0], self.draft_len
        active = ~outcome.done
        keys, k_jit = sampling.split_keys(state.keys, 2)
        tokens = _append(state, outcome)

        found, spec, laws = self.lookup(state.cache, outcome)
        hit = found & active
        kv = state.kv.rollback(jnp.where(active, outcome.lengths - 1, state.kv.lengths))
        num = jnp.full((b,), l_len, jnp.int32)
        miss = active & ~hit
        backup = self.ssd.backup
        if backup == "jit":
            spec, laws = jax.lax.cond(
                jnp.any(miss),
                lambda: _select(miss, self._jit(kv, k_jit, outcome), (spec, laws)),
                lambda: (spec, laws),
            )
        elif backup == "ngram":
            fast = NgramDrafter(
                self.vocab_size,
                draft_len=l_len,
                max_ngram=self.ssd.ngram_max,
                min_ngram=self.ssd.ngram_min,
            ).propose((), None, tokens, outcome.lengths)[0]
            spec, laws = _select(miss, (fast.tokens[:, 0], fast.probs[:, 0]), (spec, laws))
            num = jnp.where(miss, fast.num_draft[:, 0], num)
        else:  # none: an autoregressive round for the missed rows
            num = jnp.where(miss, 0, num)
        source = jnp.where(hit, FROM_CACHE, FROM_JIT if backup == "jit" else FROM_FAST)
        draft = Draft(spec[:, None], laws[:, None], num[:, None])
        return draft, state.replace(
            kv=kv,
            tokens=tokens,
            lengths=jnp.where(active, outcome.lengths, state.lengths),
            done=outcome.done,
            served=_select(active, draft, state.served),
            source=jnp.where(active, source, state.source),
            keys=keys,
            stats=_count(state, outcome, found),
        )

    def lookup(self, cache: SpeculationCache, outcome: Outcome) -> tuple[Array, Array, Array]:
        """``(found [B], tokens [B, L], probs [B, L, V])``: the branch keyed by the outcome.

        Exactness needs the choice to depend on the key (k, b) alone, never on the cached
        tokens: a content-dependent choice changes the law of what is served.
        """
        match = (cache.k_of == outcome.tau[:, None]) & (cache.bonus == outcome.next_token[:, None])
        idx = jnp.argmax(match, axis=1)  # [B]
        tokens = jnp.take_along_axis(cache.tokens, idx[:, None, None], axis=1)[:, 0]  # [B, L]
        probs = jnp.take_along_axis(cache.probs, idx[:, None, None, None], axis=1)[:, 0]
        return jnp.any(match, axis=1), tokens, probs

    def laws(self, logits: Array) -> tuple[Array, Array]:
        """``(sampled, declared)`` laws ``[..., V]`` of a branch token from the draft's logits:
        Saguaro's q' for both. The verifier receives ``declared``, so the two must be equal."""
        q = sampling.saguaro(
            sampling.probs_from_logits(logits, self.sampling), self.ssd.top, self.ssd.saguaro
        )
        return q, q

    def build(self, state: SSDDraftState) -> SSDDraftState:
        """The speculation cache for every guessed outcome of the round being verified (run
        while the target verifies ``state.served``)."""
        ssd, l_len = self.ssd, self.draft_len
        b = state.lengths.shape[0]
        active = ~state.done
        keys, k_tree = sampling.split_keys(state.keys, 2)
        base = state.lengths - 1  # [B] committed draft-cache entries
        x = jnp.maximum(state.served.tokens[:, 0], 0)  # [B, L]
        last = jnp.take_along_axis(state.tokens, base[:, None], axis=1)  # [B, 1]
        logits, kv, _ = self.model(jnp.concatenate([last, x], axis=1), cache=state.kv)  # glue
        # Bonus candidates: the draft's top tokens at each position, the drafted one excluded.
        drafted = jnp.concatenate([x, jnp.full((b, 1), -1, jnp.int32)], axis=1)  # [B, L + 1]
        vocab = jnp.arange(logits.shape[-1])[None, None, :]
        scores = jnp.where(vocab == drafted[..., None], -jnp.inf, logits.astype(jnp.float32))
        _, top = jax.lax.top_k(scores, ssd.max_fan_out)  # [B, L + 1, fan_max]
        k_hit, r_hit = branch_layout(ssd.fan_out)
        k_miss, r_miss = branch_layout(ssd.miss_fan_out)
        hit_layout = (state.source == FROM_CACHE)[:, None]  # [B, 1]
        k_of = jnp.where(hit_layout, k_hit[None], k_miss[None])  # [B, C]
        rank = jnp.where(hit_layout, r_hit[None], r_miss[None])
        bonus = top[jnp.arange(b)[:, None], k_of, rank]  # [B, C]
        tokens, probs = decode_branches(
            self.model,
            kv,
            base,
            k_of + 1,
            bonus,
            base + l_len + 1,
            k_tree,
            l_len,
            self.laws,
        )
        k_of = jnp.where(active[:, None], k_of, -1)
        return state.replace(
            kv=kv.rollback(jnp.where(active, base, state.kv.lengths)),
            cache=SpeculationCache(k_of, bonus, tokens, probs),
            keys=keys,
        )

    def _jit(self, kv: KVCache, keys: PRNGKey, outcome: Outcome) -> tuple[Array, Array]:
        """Just-in-time backup: one branch per row from the committed tokens (L calls)."""
        base = outcome.lengths - 1  # the last committed token is fed first
        b = base.shape[0]
        tokens, probs = decode_branches(
            self.model,
            kv,
            base,
            jnp.zeros((b, 1), jnp.int32),
            outcome.next_token[:, None],
            base,
            keys,
            self.draft_len,
            self.laws,
        )
        return tokens[:, 0], probs[:, 0]


def decode_branches(
    model: PureModel,
    kv: KVCache,
    base: Array,
    glue: Array,
    first: Array,
    scratch: Array,
    keys: PRNGKey,
    draft_len: int,
    laws,
) -> tuple[Array, Array]:
    """Decodes C branches per row L tokens deep with tree attention, one call per depth.

    Branch c of row b sees the committed entries ``[0, base)``, the first ``glue[b, c]`` glue
    entries after them, and its own earlier levels; it starts by feeding ``first[b, c]`` at
    position ``base + glue``.

    Args:
      model: the draft model.
      kv: its cache (entries up to ``base + max(glue)`` valid).
      base: int ``[B]`` committed entries.
      glue: int ``[B, C]`` glue entries each branch attends to.
      first: int ``[B, C]`` the token each branch feeds first (its bonus guess).
      scratch: int ``[B]`` first slot for the branch levels (depth d, branch c at
        ``scratch + d * C + c``).
      keys: per-row PRNG keys ``[B]``.
      draft_len: L.
      laws: logits ``[B, C, V]`` -> ``(sampled, declared)`` laws (:meth:`SSDDrafter.laws`).

    Returns:
      ``(tokens [B, C, L], probs [B, C, L, V])``: probs holds the exact law of each token.
    """
    b, c = first.shape
    v = model.config.vocab_size
    visible = base[:, None] + glue  # [B, C]: the prefix and the branch's glue
    step_keys = jax.vmap(lambda k: jax.random.split(k, draft_len))(keys)  # [B, L]
    fed = jnp.zeros((b, c, draft_len + 1), jnp.int32).at[:, :, 0].set(first)
    probs = jnp.zeros((b, c, draft_len, v), jnp.float32)

    def level(d, carry):
        kv, fed, probs = carry
        kv_mask = tree.level_kv_mask(visible, scratch, d + 1)  # own branch, glue, prefix
        positions = base[:, None] + glue + d  # [B, C]
        logits, kv, _ = model(
            fed[:, :, d], cache=kv.rollback(scratch + d * c), positions=positions, kv_mask=kv_mask
        )
        sampled, declared = laws(logits)  # [B, C, V]
        x = jax.vmap(sampling.sample)(step_keys[:, d], sampled)  # [B, C]
        return kv, fed.at[:, :, d + 1].set(x), probs.at[:, :, d].set(declared)

    # Unrolled over the static depths: a loop in the round splits its GPU graph.
    _, fed, probs = jax.lax.fori_loop(0, draft_len, level, (kv, fed, probs), unroll=True)
    return fed[:, :, 1:], probs


def _select(rows: Array, new, old):
    """Per-row choice between two pytrees with leading dimension B."""
    pick = lambda a, o: jnp.where(rows.reshape(rows.shape + (1,) * (a.ndim - 1)), a, o)
    return jax.tree.map(pick, new, old)


def _append(state: SSDDraftState, outcome: Outcome) -> Array:
    """The draft's token buffer with round t's accepted tokens and bonus written in."""
    b, l_len = state.lengths.shape[0], state.served.tokens.shape[-1]
    tau = jnp.clip(outcome.tau, 0, l_len)
    new = jnp.concatenate([state.served.tokens[:, 0], jnp.zeros((b, 1), jnp.int32)], axis=1)
    j = jnp.arange(l_len + 1)[None, :]
    new = jnp.where(j == tau[:, None], outcome.next_token[:, None], new)  # [B, L + 1]
    count = jnp.where(outcome.done, 0, outcome.lengths - state.lengths)  # [B]
    return append_rows(state.tokens, state.lengths, new, count)


def _count(state: SSDDraftState, outcome: Outcome, found: Array) -> SSDStats:
    """The counters after round t's outcome: ``found [B]`` says whether it was in the cache."""
    st = state.stats
    known = ~state.done & (outcome.tau >= 0)  # round t was verified (not before the first)
    cached = known & jnp.any(state.cache.k_of >= 0, axis=1)
    covered = cached & jnp.any(state.cache.k_of == outcome.tau[:, None], axis=1)
    tau = jnp.maximum(outcome.tau, 0)
    from_cache = known & (state.source == FROM_CACHE)
    return SSDStats(
        rounds=st.rounds + known,
        cached=st.cached + cached,
        hits=st.hits + (found & cached),
        covered=st.covered + covered,
        from_cache=st.from_cache + from_cache,
        tau_from_cache=st.tau_from_cache + jnp.where(from_cache, tau, 0),
        tau_from_backup=st.tau_from_backup + jnp.where(known & ~from_cache, tau, 0),
    )
