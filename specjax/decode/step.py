"""One decoding step: draft -> one target tree forward -> verify -> commit -> roll back caches.

Both the speculative step and the autoregressive baseline share :func:`init_state`, the sampling
code and :func:`commit_tokens` (stop tokens, ``max_new_tokens``, inactive rows untouched). Rows
that are done still flow through the step (static shapes) but nothing of theirs changes.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from specjax import sampling, tree, verify
from specjax.buffers import append_rows
from specjax.decode import widths as width_control
from specjax.decode.config import DecodeConfig
from specjax.decode.state import DecodeState, StepStats
from specjax.drafters.base import (
    Draft,
    Drafter,
    catches_up,
    draws_with_replacement,
    feature_layers,
    near,
    with_sampling,
)
from specjax.models.cache import KVCache
from specjax.models.pure import PureModel, prefill, prefill_features
from specjax.row_sampling import RowSampling
from specjax.sampling import SamplingParams, split_keys
from specjax.typing import Array, PRNGKey


def init_state(
    target: PureModel,
    drafter: Drafter | None,
    prompts: Array,
    prompt_lengths: Array,
    key: PRNGKey,
    *,
    capacity: int,
    buffer: int,
    draft_len: int | None = None,
    widths: tuple[int, ...] = (),
    row_keys: PRNGKey | None = None,
    lazy_draft: bool = True,
    rows: RowSampling | None = None,
    max_new_tokens: Array | None = None,
) -> DecodeState:
    """Prefills target (and drafter) caches with every prompt token but the last.

    Args:
      target: the target model.
      drafter: a drafter or None (autoregressive).
      prompts: int ``[B, T]`` right-padded prompts; prompt_lengths: int ``[B]`` (>= 1).
      key: one PRNG key; row b uses ``fold_in(key, b)`` unless ``row_keys`` is given.
      capacity: S of the KV caches; buffer: length of the token buffer.
      draft_len: L when ``drafter`` is None but a drafter elsewhere (its own devices) drafts;
        the state then has no draft state.
      widths: the draft widths a step chooses among (``DecodeConfig.widths``); () for a fixed
        width (the state then has no :class:`~specjax.decode.widths.WidthControl`).
      row_keys: per-row PRNG keys ``[B]`` (e.g. one per request,
        :func:`specjax.decode.slots.request_keys`); default ``fold_in(key, b)``.
      lazy_draft: with ``widths`` holding 0, a model drafter that catches up after width-0
        steps (``idle_catch_up``) reads the prompt at its first drafting step instead of here,
        so a generation that never drafts never runs the draft. False prefills it here (rows
        admitted into a running batch: a catch-up there would run on every row).
      rows, max_new_tokens: the rows' own sampling and int ``[B]`` limits
        (``DecodeConfig.rows``); None: the config's.
    """
    b, t = prompts.shape
    if drafter is not None:
        draft_len = drafter.draft_len
    draft_len = draft_len or 0
    tokens = jnp.zeros((b, buffer), jnp.int32).at[:, :t].set(prompts.astype(jnp.int32))
    prompt_lengths = jnp.asarray(prompt_lengths, jnp.int32)
    layers = feature_layers(drafter)
    if layers:  # a feature drafter reads the target's hidden states of the prompt
        target_cache, hidden = prefill_features(target, prompts, prompt_lengths, capacity, layers)
        draft_state = drafter.init(prompts, prompt_lengths, capacity, features=hidden)
    else:
        target_cache = prefill(target, prompts, prompt_lengths, capacity)
        lazy = lazy_draft and 0 in widths and catches_up(drafter)
        extra = {"lazy": True} if lazy else {}
        draft_state = (
            () if drafter is None else drafter.init(prompts, prompt_lengths, capacity, **extra)
        )
    keys = sampling.row_keys(key, b) if row_keys is None else row_keys
    return DecodeState(
        tokens=tokens,
        lengths=prompt_lengths,
        prompt_lengths=prompt_lengths,
        done=jnp.zeros((b,), bool),
        target_cache=target_cache,
        draft_state=draft_state,
        keys=keys,
        noise_keys=jax.vmap(lambda k: jax.random.fold_in(k, NOISE_STREAM))(keys),
        stats=StepStats.zeros(b, draft_len),
        control=None
        if not widths
        else width_control.init_control(
            b, draft_len, widths, jax.random.fold_in(key, CONTROL_STREAM)
        ),
        sampling=None if rows is None else jax.tree.map(jnp.asarray, rows),
        max_new_tokens=None if max_new_tokens is None else jnp.asarray(max_new_tokens, jnp.int32),
    )


CONTROL_STREAM = 0x7FFFFFFF
"""``fold_in`` data of the width controller's key (rows use ``0 .. B - 1``)."""

NOISE_STREAM = 0x7FFFFFFE
"""``fold_in`` data of a row's noise key (:attr:`DecodeState.noise_keys`) from its row key."""


def laws_of(state: DecodeState, config: DecodeConfig) -> SamplingParams | RowSampling:
    """What the step's target and drafter process logits with: the rows' own sampling where
    the state carries it (unless every row is known greedy: the static greedy path), else the
    config's."""
    if state.sampling is None or config.greedy:
        return config.sampling
    return state.sampling


def commit_tokens(
    state: DecodeState, new: Array, count: Array, config: DecodeConfig
) -> tuple[Array, Array, Array]:
    """Appends ``new[b, :count[b]]`` (``new [B, M]``) to active rows, ending rows at a stop
    token (kept) or at ``max_new_tokens`` (the row's own where the state carries it).

    Returns:
      ``(tokens [B, U], lengths [B], done [B])``.
    """
    active = ~state.done
    count = jnp.where(active, count, 0)
    tokens = append_rows(state.tokens, state.lengths, new, count)
    write = jnp.arange(new.shape[1])[None, :] < count[:, None]  # [B, M]
    is_stop = jnp.isin(new, jnp.asarray(config.stop_tokens, jnp.int32)) & write
    has_stop = jnp.any(is_stop, axis=1)
    count = jnp.where(has_stop, jnp.argmax(is_stop, axis=1) + 1, count)
    new_tokens = config.max_new_tokens if state.max_new_tokens is None else state.max_new_tokens
    limit = state.prompt_lengths + new_tokens
    lengths = jnp.minimum(state.lengths + count, limit)
    done = state.done | (active & (has_stop | (lengths >= limit)))
    return tokens, jnp.where(active, lengths, state.lengths), done


def finite_rows(logits: Array) -> Array:
    """bool ``[B]``: whether every logit of each row (``logits [B, T, V]``) is finite."""
    return jnp.all(jnp.isfinite(logits), axis=tuple(range(1, logits.ndim)))


def last_tokens(state: DecodeState) -> Array:
    """``[B, 1]`` each row's last committed token, the one the target has not seen yet."""
    return jnp.take_along_axis(state.tokens, (state.lengths - 1)[:, None], axis=1)


def autoregressive_step(
    target: PureModel, state: DecodeState, config: DecodeConfig, features: tuple[int, ...] = ()
):
    """One target token per active row, sampled exactly as the speculative step's target law:
    the Gumbel-max draw of the row's noise at the token's position (the ``gumbel`` verifier's
    target token, so the two agree token for token), the first maximal logit at temperature 0.

    Returns:
      ``(state, hidden)``: ``hidden [B, 1, A, D]`` the fed token's features at the target
      blocks ``features`` (a feature drafter's) from the same forward, None without them.
    """
    logits, cache, hidden = target_forward(
        target, last_tokens(state), features, cache=state.target_cache
    )  # [B, 1, V], _, [B, 1, A, D] or None
    params = laws_of(state, config)
    token = sampling.position_tokens(state.noise_keys, state.lengths, logits[:, 0], params)
    active = ~state.done
    tokens, lengths, done = commit_tokens(state, token[:, None], jnp.ones_like(token), config)
    fault = ~finite_rows(logits)  # broken target weights: the row ends, the host raises
    cache = cache.rollback(jnp.where(active, state.lengths, state.target_cache.lengths))
    none = jnp.zeros_like(token)
    new = state.replace(
        tokens=tokens,
        lengths=lengths,
        done=done | (active & fault),
        target_cache=cache,
        stats=state.stats.record(active, none, none, fault=fault),
    )
    return new, hidden


def cut_at_stop(draft: Draft, stop_tokens: tuple[int, ...]) -> Array:
    """``num_draft [B, K]`` shortened so no path goes past its first stop token."""
    if not stop_tokens:
        return draft.num_draft
    l_len = draft.tokens.shape[-1]
    is_stop = jnp.isin(draft.tokens, jnp.asarray(stop_tokens, jnp.int32))  # [B, K, L]
    first = jnp.where(jnp.any(is_stop, -1), jnp.argmax(is_stop, -1) + 1, l_len)
    return jnp.minimum(draft.num_draft, first).astype(jnp.int32)


def verify_rows(
    config: DecodeConfig, keys, draft: Draft, num_draft, target_probs, *, replacement: bool = True
):
    """Runs the verifier once for the batch, each row with its own key ``keys [B]`` (rows never
    share randomness; a row's outcome is what verifying it alone with its key gives), or for
    ``gumbel`` the noise of its positions ``[B, L + 1, V]``.
    ``replacement``: the drafter's (how sibling paths were drawn), told to ``specinfer``."""
    fn = verify.get(config.verifier)
    if config.verifier == "specinfer":
        fn = functools.partial(fn, replacement=replacement)
    if config.multipath:  # [B, K, L] paths
        return fn(keys, draft.tokens, draft.probs, target_probs, num_draft=num_draft)
    first = lambda x: x[:, 0]  # one chain: [B, L]
    return fn(
        keys,
        first(draft.tokens),
        first(draft.probs),
        first(target_probs),
        num_draft=first(num_draft),
    )


def tree_inputs(state: DecodeState, draft_tokens: Array) -> tuple[Array, Array, Array]:
    """The target's input for one tree forward: the root (each row's last committed token, not
    yet in the target cache) and K paths of L draft nodes.

    Args:
      state: the decoding state before the step.
      draft_tokens: int ``[B, K, L]`` (-1 past a path's end; fed as token 0).

    Returns:
      ``feed [B, T]``, ``positions [B, T]`` and the attention ``mask [B, T, T]`` among the tree's
      nodes, T = 1 + K·L.
    """
    b, k_paths, l_len = draft_tokens.shape
    feed = jnp.concatenate(
        [last_tokens(state), jnp.maximum(draft_tokens, 0).reshape(b, k_paths * l_len)], axis=1
    )  # [B, T]
    positions = (state.lengths - 1)[:, None] + jnp.asarray(tree.tree_depths(k_paths, l_len))
    t = positions.shape[1]
    mask = jnp.broadcast_to(jnp.asarray(tree.tree_mask(k_paths, l_len)), (b, t, t))
    return feed, positions, mask


def verify_tree(
    config: DecodeConfig,
    keys: PRNGKey,
    draft: Draft,
    logits: Array,
    *,
    replacement: bool = True,
    params: SamplingParams | RowSampling | None = None,
):
    """Verifies a draft tree against the target's logits of :func:`tree_inputs`' feed.

    Args:
      config: the decoding config (verifier, sampling, stop tokens).
      keys: per-row PRNG keys ``[B]``.
      draft: the drafter's K paths of L tokens per row.
      logits: ``[B, T, V]`` the target's logits at the tree's nodes.
      replacement: the drafter's ``replacement`` (how its sibling paths were drawn).
      params: the target's sampling (:func:`laws_of`); None: ``config.sampling``.

    Returns:
      ``(result, num_draft, overlap)``: the verifier's result per row (``num_accepted [B]``,
      ``path [B]``, ``next_token [B]``), ``num_draft [B, K]`` cut at the first stop token and at
      the first draft law that is not a probability vector (the verifier cuts there too), and
      where ``config.soft_verdicts``, Σ min(p, q) at each position of the chain ``[B, L]``
      (-1 past its proposed tokens; else None).
    """
    # The verifier makes the same cut from the same reductions of draft.probs; XLA merges the
    # two (one jit), so the laws are checked once per step.
    bad = verify.common.invalid_laws(draft.probs)  # [B, K, L]
    num_draft = verify.common.cut_at(bad, cut_at_stop(draft, config.stop_tokens))  # [B, K]
    target_probs = tree_laws(config, logits, *draft.tokens.shape[1:], params)  # [B, K, L + 1, V]
    result = verify_rows(config, keys, draft, num_draft, target_probs, replacement=replacement)
    overlap = None
    if config.soft_verdicts and draft.tokens.shape[1] == 1:
        l_len = draft.tokens.shape[2]
        clean = jnp.where(bad[:, 0, :, None], 0.0, draft.probs[:, 0])  # [B, L, V]
        both = jnp.minimum(target_probs[:, 0, :l_len], clean)  # [B, L, V]
        proposed = jnp.arange(l_len)[None, :] < num_draft  # [B, L]
        overlap = jnp.where(proposed, jnp.sum(both, axis=-1), -1.0)
    return result, num_draft, overlap


def tree_laws(
    config: DecodeConfig,
    logits: Array,
    k_paths: int,
    l_len: int,
    params: SamplingParams | RowSampling | None = None,
) -> Array:
    """``target_probs [B, K, L + 1, V]``: the target's laws as sampled (``params``, default
    ``config.sampling``) at the root and at every node of each of K paths of L, from the tree
    forward's ``logits [B, T, V]`` (:func:`tree_inputs`' feed); what :func:`verify_tree`
    verifies against."""
    params = config.sampling if params is None else params
    probs = sampling.probs_from_logits(logits, params)  # [B, T, V]
    return probs[:, jnp.asarray(tree.node_index(k_paths, l_len))]


def speculative_step(target: PureModel, drafter: Drafter, state: DecodeState, config: DecodeConfig):
    """Draft, score the whole draft tree in ONE target forward, verify, commit, roll back."""
    keys, k_draft, k_verify = split_keys(state.keys, 3)
    k_draft = draft_keys(state, config, k_draft)
    drafting = with_sampling(near(drafter, config.widths), laws_of(state, config))
    draft, draft_state = drafting.propose(state.draft_state, k_draft, state.tokens, state.lengths)
    layers = feature_layers(drafter)
    out = verify_and_commit(
        target,
        state.replace(keys=keys),
        draft,
        k_verify,
        config,
        features=layers,
        replacement=draws_with_replacement(drafter),
    )
    new, path, tau, hidden = out
    extra = {"features": hidden} if layers else {}  # the root's and the path's target features
    draft_state = drafter.commit(
        state.draft_state, draft_state, state.lengths, path, tau, ~state.done, **extra
    )
    return new.replace(draft_state=draft_state)


def draft_keys(state: DecodeState, config: DecodeConfig, k_draft: PRNGKey) -> PRNGKey:
    """The keys a drafter draws with: the step's own, or for the ``gumbel`` verifier the rows'
    noise keys, so that a coupled drafter's token at position n is drawn with the noise the
    target's is (:mod:`specjax.verify.gumbel`)."""
    return state.noise_keys if config.verifier == "gumbel" else k_draft


def verify_and_commit(
    target: PureModel,
    state: DecodeState,
    draft: Draft,
    k_verify: PRNGKey,
    config: DecodeConfig,
    features: tuple[int, ...] = (),
    *,
    replacement: bool = True,
):
    """The target's half of a speculative step (everything but drafting and the draft cache):
    :func:`score_tree` then :func:`commit_tree`.

    Args:
      features: target blocks whose hidden states a feature drafter reads; they come out of the
        same tree forward.
      replacement: the drafter's ``replacement`` (how its sibling paths were drawn), for
        ``specinfer``.

    Returns:
      ``(state, path, tau, features)``: the new state (``draft_state`` untouched), the followed
      ``path [B]`` and ``tau [B]``, and the root's and the followed path's hidden states at the
      blocks ``features`` ``[B, L + 1, A, D]`` (None without them).
    """
    logits, cache, hidden = score_tree(target, state, draft.tokens, features)
    new_state, path, tau = commit_tree(
        state, draft, logits, cache, k_verify, config, replacement=replacement
    )
    if features:
        hidden = tree.path_nodes(hidden, path, draft.tokens.shape[2])
    return new_state, path, tau, hidden


class TargetOut(NamedTuple):
    """What every target forward of a step returns.

    Attributes:
      logits: ``[B, T, V]``.
      cache: the target cache with the T fed tokens written.
      features: the hidden states ``[B, T, A, D]`` of the blocks a feature drafter reads (A of
        them), or None where it reads none.
    """

    logits: Array
    cache: KVCache
    features: Array | None


def target_forward(target: PureModel, tokens: Array, features: tuple[int, ...] = (), **kwargs):
    """The target's forward over ``tokens [B, T]`` as a :class:`TargetOut` (``kwargs``: the
    model's ``cache``, ``positions``, ``attn_mask``)."""
    return TargetOut(*target(tokens, features=features, **kwargs))


def score_tree(
    target: PureModel, state: DecodeState, draft_tokens: Array, features: tuple[int, ...] = ()
) -> TargetOut:
    """The step's ONE target forward, over the draft tree of :func:`tree_inputs`: the logits,
    the target cache with all T nodes written (:func:`commit_tree` rolls it back) and, with
    ``features``, those blocks' hidden states (else None)."""
    feed, positions, mask = tree_inputs(state, draft_tokens)  # [B, T], [B, T], [B, T, T]
    kwargs = dict(cache=state.target_cache, positions=positions, attn_mask=mask)
    return target_forward(target, feed, features, **kwargs)


def commit_tree(
    state: DecodeState,
    draft: Draft,
    logits: Array,
    cache: KVCache,
    k_verify: PRNGKey,
    config: DecodeConfig,
    *,
    replacement: bool = True,
) -> tuple[DecodeState, Array, Array]:
    """Verifies a draft tree from its forward (:func:`score_tree`'s ``logits`` and ``cache``)
    and commits the accepted prefix and the next token (a chain verifier verifies path 0).

    Returns:
      The new state (``draft_state`` untouched), the followed ``path [B]`` and ``tau [B]``.
    """
    b, k_paths, l_len = draft.tokens.shape
    params = laws_of(state, config)
    if config.verifier == "gumbel":  # the noise of the draft's and the bonus's positions
        positions = state.lengths[:, None] + jnp.arange(l_len + 1)[None, :]
        k_verify = sampling.race_weights(state.noise_keys, positions, logits.shape[-1], params)
    result, num_draft, overlap = verify_tree(
        config, k_verify, draft, logits, replacement=replacement, params=params
    )
    tau, path = result.num_accepted, result.path  # [B], [B]

    # Commit the accepted prefix of the followed path and the next token.
    path_tokens = jnp.take_along_axis(draft.tokens, path[:, None, None], axis=1)[:, 0]  # [B, L]
    j = jnp.arange(l_len + 1)[None, :]
    new = jnp.concatenate([path_tokens, jnp.zeros((b, 1), jnp.int32)], axis=1)
    new = jnp.where(j == tau[:, None], result.next_token[:, None], new)  # [B, L + 1]
    active = ~state.done
    tokens, lengths, done = commit_tokens(state, new, tau + 1, config)

    # Caches: keep the root and the accepted path's first tau nodes, contiguously.
    if k_paths > 1:
        cache = cache.compact(state.lengths, tree.path_slots(state.lengths, path, l_len), tau)
    else:  # a chain's accepted nodes already sit right after the root
        cache = cache.rollback(state.lengths + tau)
    cache = cache.rollback(jnp.where(active, cache.lengths, state.target_cache.lengths))

    followed = jnp.take_along_axis(num_draft, path[:, None], axis=1)[:, 0]  # [B]
    invalid = jnp.any(num_draft < cut_at_stop(draft, config.stop_tokens), axis=1)  # bad laws
    fault = ~finite_rows(logits)  # broken target weights: the row ends, the host raises
    new_state = state.replace(
        tokens=tokens,
        lengths=lengths,
        done=done | (active & fault),
        target_cache=cache,
        stats=state.stats.record(active, tau, followed, invalid, fault, overlap),
    )
    return new_state, path, tau
