"""Continuous batching on the device: a decode state of B *slots* that new prompts are inserted
into while the other rows keep decoding.

* :func:`prefill_rows` prefills ``n`` new prompts into a small state of the slots' capacity
  (one program for every row count B of the slots) and :func:`scatter_program` writes its rows
  into the chosen slots of the big one (donated: updated in place). Per-row leaves (tokens,
  caches, draft state, keys, counters, the width controller's per-row estimates) are replaced;
  batch-level leaves (the controller's scalars) are kept. Which axis of a leaf is its row axis
  is read off two states' shapes at different row counts (:func:`leaf_axes`), so every drafter's
  state works without a rule per type.
* :func:`grow_program` moves a running state into one of a larger capacity, so that a job
  whose prompts are run shortest first pays for long prompts' cache slots only once they come;
  :func:`move_rows` into one of fewer or more rows, so that a server decodes only as many rows
  as it has requests (rounded up to a batch bucket).
* :func:`request_keys`: a request's PRNG key depends only on the seed and its id, so its output
  is the same whatever slot, batch size, order or resume point it runs in; a request with a seed
  of its own takes the key :func:`~specjax.decode.generate` gives one prompt with that seed
  (:func:`seeded_keys`), so it reproduces that generation.
* Per-row values (``DecodeConfig.rows``: a request's sampling and ``max_new_tokens``) are traced
  arrays scattered like every other row leaf: one prefill program serves every value.

The host loop that decides what to insert and when is :mod:`specjax.decode.batching`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode.state import DecodeState
from specjax.decode.step import init_state
from specjax.row_sampling import RowSampling
from specjax.sampling import row_keys
from specjax.typing import Array, PRNGKey

REQUEST_STREAM = 0x5EC0DE
"""``fold_in`` data separating request keys from the row keys of :func:`generate` (0 .. B - 1)."""


def id_words(request_id: Any) -> np.ndarray:
    """Two uint32 words of a 64-bit hash of a request id (its JSON text: ``3`` and ``"3"``
    differ). 64 bits, so that millions of ids almost surely get distinct randomness."""
    text = json.dumps(request_id, sort_keys=True, ensure_ascii=False)
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return np.frombuffer(digest, dtype="<u4").copy()


def request_keys(seed: Array, words: Array) -> PRNGKey:
    """Per-request keys ``[n]`` from the seed and ``words [n, 2]`` (:func:`id_words`)."""
    base = jax.random.fold_in(jax.random.key(seed), REQUEST_STREAM)
    one = lambda w: jax.random.fold_in(jax.random.fold_in(base, w[0]), w[1])
    return jax.vmap(one)(jnp.asarray(words, jnp.uint32))


def seeded_keys(seeds: Array) -> PRNGKey:
    """Keys ``[n]`` of requests with seeds of their own ``seeds [n]``: row 0's key of a
    generation with that seed (:func:`~specjax.sampling.row_keys`), so that a seeded request
    decodes as ``generate([prompt], config, seed=s)`` does."""
    return jax.vmap(lambda s: row_keys(jax.random.key(s), 1)[0])(jnp.asarray(seeds, jnp.int32))


def leaf_axes(one: DecodeState, two: DecodeState) -> tuple[int | None, ...]:
    """The row axis of every leaf (in flattening order; None for batch-level leaves) of a
    state, read off two states of the same structure and different row counts."""
    pairs = zip(jax.tree.leaves(one), jax.tree.leaves(two), strict=True)
    return tuple(changed_axis(a.shape, b.shape) for a, b in pairs)


def changed_axis(one: tuple[int, ...], two: tuple[int, ...]) -> int | None:
    """The row axis of a state leaf, from its shapes at two batch sizes: the one axis whose
    size differs (None: a batch-level leaf)."""
    changed = [i for i, (x, y) in enumerate(zip(one, two, strict=True)) if x != y]
    if len(changed) > 1:
        raise ValueError(f"a state leaf {one} has more than one batch axis")
    return changed[0] if changed else None


def prefill_rows(
    target,
    drafter,
    prompts: Array,
    prompt_lengths: Array,
    words: Array,
    seed: Array,
    seeds: Array,
    seeded: Array,
    rows: RowSampling | None = None,
    limits: Array | None = None,
    *,
    capacity: int,
    buffer: int,
    widths: tuple[int, ...] = (),
) -> DecodeState:
    """The fresh decode state ``[n, ...]`` of ``n`` new prompts, to be put into the slots by
    :func:`scatter_program`. It does not depend on the slots' row count B, so one program
    serves every B.

    Args:
      target, drafter: the models (as for :func:`~specjax.decode.step.init_state`).
      prompts: int ``[n, T]`` right-padded new prompts; prompt_lengths: int ``[n]`` (>= 1).
      words: uint32 ``[n, 2]`` the requests' id hashes (:func:`id_words`).
      seed: the run's seed.
      seeds: int32 ``[n]`` the requests' own seeds, read where ``seeded [n]`` (bool)
        (:func:`seeded_keys`; the others' keys come from ``seed`` and ``words``).
      rows: the requests' :class:`~specjax.row_sampling.RowSampling` ``[n]`` and ``limits``
        their int32 ``[n]`` ``max_new_tokens``, where the state carries them
        (``DecodeConfig.rows``); else None.
      capacity, buffer, widths: the sizes of the slots' state.
    """
    keys = jnp.where(seeded, seeded_keys(seeds), request_keys(seed, words))
    return init_state(
        target,
        drafter,
        prompts,
        prompt_lengths,
        jax.random.key(seed),
        capacity=capacity,
        buffer=buffer,
        widths=widths,
        row_keys=keys,
        lazy_draft=False,  # a new row's catch-up would run the draft on every row
        rows=rows,
        max_new_tokens=limits,
    )


def scatter_program(
    state: DecodeState, small: DecodeState, slots: Array, *, axes: tuple[int | None, ...]
) -> DecodeState:
    """``state`` ``[B, ...]`` (donate it) with ``small``'s rows (:func:`prefill_rows`, ``[n,
    ...]``) written at ``slots [n]`` (an index >= B is dropped: padding entries). ``axes``: each
    leaf's row axis (:func:`leaf_axes`); batch-level leaves (None: the width controller's
    scalars) keep ``state``'s values."""

    def put(x, y, axis):
        if axis is None:
            return x
        index = (slice(None),) * axis + (slots,)
        return x.at[index].set(y if y.dtype == x.dtype else y.astype(x.dtype), mode="drop")

    leaves, treedef = jax.tree.flatten(state)
    new = map(put, leaves, jax.tree.leaves(small), axes)
    return jax.tree.unflatten(treedef, list(new))


def grow_program(state: DecodeState, empty: DecodeState) -> DecodeState:
    """``state`` moved into ``empty``, a state of the same slots with a larger capacity S and
    token buffer (donate ``empty``): every leaf whose shape grew is written into the prefix of
    ``empty``'s (the committed entries keep their places; the rest is scratch), the others are
    ``state``'s. Rows keep decoding as if nothing happened: only S changed."""

    def move(small, big):
        if small.shape == big.shape:
            return small
        return big.at[tuple(slice(0, n) for n in small.shape)].set(small)

    return jax.tree.map(move, state, empty)


@functools.partial(jax.jit, donate_argnums=1)
def move_rows(state: DecodeState, empty: DecodeState, take: Array) -> DecodeState:
    """Rows ``take [n]`` of ``state`` (B rows) as the first n rows of ``empty`` (donated; a
    state of B' != B rows and the same capacity, n = min(B, B')); the other rows stay
    ``empty``'s (done), batch-level leaves are ``state``'s. A leaf's row axis is the one whose
    size differs between the two states (:func:`changed_axis`, as :func:`leaf_axes` reads it)."""

    def move(x, y):
        axis = changed_axis(x.shape, y.shape)
        if axis is None:  # a batch-level leaf
            return x
        rows = jnp.take(x, take, axis=axis)
        index = (slice(None),) * axis + (slice(0, take.shape[0]),)
        return y.at[index].set(rows.astype(y.dtype))

    return jax.tree.map(move, state, empty)


@functools.partial(jax.jit, donate_argnums=0)
def end_row(state: DecodeState, slot: Array) -> DecodeState:
    """``state`` (donated) with row ``slot`` marked done: a cancelled request's row stops
    counting as running until a new request is inserted there."""
    return state.replace(done=state.done.at[slot].set(True))
