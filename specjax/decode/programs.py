"""The two compiled programs of a generation and where they are kept.

*prefill* (prompts -> :class:`~specjax.decode.state.DecodeState`) and *decode* (``step`` under
``lax.while_loop`` for at most ``max_steps`` steps or until every row is done; the state is
donated, so caches are updated in place; with adaptive widths, one inner loop per width), their
layouts on a mesh, and :data:`PROGRAMS`, the process's cache of compiled pairs (and of the width
costs measured once on each).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from specjax import sharding
from specjax.decode import widths
from specjax.decode.adaptive import (
    adaptive_step,
    book_idle,
    choose_width,
    idle_quota,
    next_width,
    skip_step,
    width_step,
)
from specjax.decode.config import DecodeConfig
from specjax.decode.memory import check_fits
from specjax.decode.slots import grow_program, prefill_rows, scatter_program
from specjax.decode.state import DecodeState
from specjax.decode.step import autoregressive_step, init_state, speculative_step
from specjax.models.cache import KVCache
from specjax.models.pure import PureModel
from specjax.row_sampling import RowSampling


def state_shardings(state: DecodeState, mesh: Mesh, draft_tp: bool) -> DecodeState:
    """The mesh layout of a decode state (a DecodeState of NamedShardings): rows over
    ``data``; KV caches also split their KV heads over ``model`` (the draft's only when it is
    tensor-parallel)."""
    rows = lambda x: sharding.batch_sharding(mesh, len(x.shape))
    fields = {
        f.name: jax.tree.map(rows, getattr(state, f.name))
        for f in dataclasses.fields(state)
        if f.name not in ("target_cache", "draft_state", "control")
    }
    if state.control is not None:  # per-row estimates over rows; the batch's scalars replicated
        replicated = NamedSharding(mesh, PartitionSpec())
        control = jax.tree.map(lambda _: replicated, state.control)
        per_row = ("accept", "seen", "first")
        per_row = {k: rows(getattr(state.control, k)) for k in per_row}
        fields["control"] = dataclasses.replace(control, **per_row)

    def cache_layout(cache: KVCache, tensor_parallel: bool) -> KVCache:
        split = tensor_parallel and sharding.kv_heads_split(cache.k.shape[3], mesh)
        kv = NamedSharding(mesh, sharding.cache_spec(split))
        return KVCache(kv, kv, NamedSharding(mesh, PartitionSpec("data")))

    # A draft's caches split like the target's (KV heads over ``model`` where the draft is
    # tensor-parallel), its other leaves over rows.
    is_cache = lambda x: isinstance(x, KVCache)
    layout = lambda x: cache_layout(x, draft_tp) if is_cache(x) else rows(x)
    draft = jax.tree.map(layout, state.draft_state, is_leaf=is_cache)
    target = cache_layout(state.target_cache, True)
    return state.replace(**fields, target_cache=target, draft_state=draft)


def constrain_state(state: DecodeState, mesh: Mesh | None, draft_tp: bool) -> DecodeState:
    """Keeps the state on its mesh layout inside a compiled program (identity without a mesh)."""
    if mesh is None:
        return state
    return jax.lax.with_sharding_constraint(state, state_shardings(state, mesh, draft_tp))


def _readable_shardings(state: DecodeState, mesh: Mesh, draft_tp: bool) -> DecodeState:
    """Output layout of the programs: caches as inside the loop, everything else replicated
    so that every process can read tokens, lengths and counters."""
    inner = state_shardings(state, mesh, draft_tp)
    replicated = NamedSharding(mesh, PartitionSpec())
    small = {
        f.name: jax.tree.map(lambda _: replicated, getattr(inner, f.name))
        for f in dataclasses.fields(inner)
        if f.name not in ("target_cache", "draft_state")
    }
    draft = inner.draft_state
    if not isinstance(state.draft_state, KVCache):
        draft = jax.tree.map(lambda _: replicated, draft)
    return inner.replace(**small, draft_state=draft)


def step(
    target: PureModel,
    drafter,
    state: DecodeState,
    config: DecodeConfig,
    inputs: widths.WidthInputs | None = None,
) -> DecodeState:
    """The step ``config`` asks for: autoregressive when not speculative, adaptive when the
    state carries a width controller (``inputs`` then gives its costs), else speculative at the
    drafter's full width."""
    if not config.speculative:
        return autoregressive_step(target, state, config)[0]
    if state.control is not None:
        return adaptive_step(target, drafter, state, config, inputs)
    return speculative_step(target, drafter, state, config)


def prefill_program(
    target,
    drafter,
    prompts,
    prompt_lengths,
    active,
    seed,
    *,
    capacity,
    buffer,
    widths=(),
    rows=None,
):
    """Prompts -> the initial :class:`DecodeState` (padding rows start done); ``rows``: the
    rows' default ``(SamplingParams, max_new_tokens)`` in the state (``DecodeConfig.rows``), or
    None for none."""
    b = prompts.shape[0]
    per_row = {}
    if rows is not None:
        per_row = dict(
            rows=RowSampling.full(rows[0], b), max_new_tokens=jnp.full((b,), rows[1], jnp.int32)
        )
    state = init_state(
        target,
        drafter,
        prompts,
        prompt_lengths,
        jax.random.key(seed),
        capacity=capacity,
        buffer=buffer,
        widths=widths,
        **per_row,
    )
    return state.replace(done=~active)


def decode_program(
    target,
    drafter,
    state,
    max_steps,
    until_done=None,
    inputs=None,
    *,
    config,
    mesh=None,
    draft_tp=False,
):
    """Runs ``step`` until ``until_done`` rows are done (default: every row) or ``max_steps``
    steps have run (``inputs``: the width policy's runtime inputs when ``config.widths`` is
    set). Continuous batching stops early this way to refill finished rows.

    Its ``while`` loops are the only ones: none inside a step (docs/architecture.md, "No loops
    inside a step"), but for a model drafter's catch-up where a width is 0.

    Returns:
      ``(state, steps)``: the state after the steps and how many ran (int32 ``[]``).
    """
    constrain = lambda s: constrain_state(s, mesh, draft_tp)
    until_done = state.batch if until_done is None else until_done
    cond = lambda c: (c[0] < max_steps) & (jnp.sum(c[1].done) < until_done)
    if state.control is None:
        body = lambda c: (c[0] + 1, constrain(step(target, drafter, c[1], config)))
        steps, state = jax.lax.while_loop(cond, body, (jnp.int32(0), constrain(state)))
        return state, steps

    # Adaptive widths: one inner loop per width, running while the controller picks it (the
    # pick for the next step is made at the end of each step and carried). Loops carry the
    # donated caches in place; a lax.switch would copy them around its branches.
    running = lambda c: cond(c[:2])

    def run_idle(carry):
        """Width 0 for a drafter without a free look: runs of plain one-token steps, each as
        long as the policy asks (:func:`idle_quota`), booked at once."""

        def block(c):
            quota = idle_quota(config, c[1], inputs)

            def one(d):  # d: (steps, state, runs, counted)
                counted = d[3] + jnp.any(~d[1].done).astype(jnp.int32)
                state = constrain(skip_step(target, drafter, d[1], config))
                return d[0] + 1, state, d[2] + 1, counted

            more = lambda d: running(d[:2]) & (d[2] < quota)
            start = (c[0], c[1], jnp.int32(0), jnp.int32(0))
            steps, state, runs, counted = jax.lax.while_loop(more, one, start)
            picked, state = choose_width(drafter, book_idle(state, runs, counted), config, inputs)
            return steps, constrain(state), picked

        return jax.lax.while_loop(lambda c: running(c) & (c[2] == 0), block, carry)

    def run_width(index: int, carry):
        if config.widths[index] == 0 and not drafter.free_look:
            return run_idle(carry)

        def one(c):
            state = width_step(target, drafter, c[1], config, index)
            picked, state = choose_width(drafter, state, config, inputs)
            return c[0] + 1, constrain(state), picked

        return jax.lax.while_loop(lambda c: running(c) & (c[2] == index), one, carry)

    def each_width(carry):
        for index in range(len(config.widths)):
            carry = run_width(index, carry)
        return carry

    picked, state = next_width(drafter, constrain(state), config, inputs)
    steps, state, _ = jax.lax.while_loop(running, each_width, (jnp.int32(0), state, picked))
    return state, steps


def signature(args) -> tuple:
    """What a compiled program depends on: pytree structure (static fields included), shapes,
    dtypes and layouts of the leaves."""
    leaves, treedef = jax.tree.flatten(args)
    avals = tuple(
        (tuple(x.shape), x.dtype, getattr(x, "weak_type", False), getattr(x, "sharding", None))
        for x in leaves
    )
    return treedef, avals


class ProgramCache:
    """Compiled programs kept by key; the least recently used beyond ``capacity`` are dropped
    (XLA:CPU runs out of code memory after many dozens of programs)."""

    def __init__(self, capacity: int):
        self._kept: collections.OrderedDict = collections.OrderedDict()
        self.capacity = capacity

    def get(self, key, build: Callable[[], Any]) -> tuple[Any, bool]:
        """``(program, built)``: the program kept under ``key``, else ``build()``'s."""
        built = key not in self._kept
        if built:
            self._kept[key] = build()
            while len(self._kept) > self.capacity:
                self._kept.popitem(last=False)
        self._kept.move_to_end(key)
        return self._kept[key], built

    def clear(self) -> None:
        """Drops every kept program."""
        self._kept.clear()


@dataclasses.dataclass(frozen=True)
class Programs:
    """A generation's two compiled programs.

    Attributes:
      prefill: ``(target, drafter, prompts, prompt_lengths, active, seed) -> DecodeState``.
      decode: ``(target, drafter, state, max_steps, until_done, width_inputs) -> (state,
        steps run)``, the state donated.
      key: what they are kept under in :data:`PROGRAMS` (also the key of their measured width
        costs).
    """

    prefill: Any
    decode: Any
    key: tuple


class _Programs:
    """Compiled :class:`Programs` kept per argument signature and static settings."""

    def __init__(self, capacity: int = 48):
        self.kept = ProgramCache(capacity)
        self.compiled = 0  # programs compiled so far in this process
        self.costs: dict = {}  # per program key: the width costs measured on it once

    def get(self, args, sizes: dict, config, mesh, draft_tp: bool) -> Programs:
        """The :class:`Programs` for prefill arguments ``args``, compiled once per key."""
        key = (signature(args), tuple(sorted(sizes.items())), config, mesh, draft_tp)
        pair, built = self.kept.get(key, lambda: self._compile(args, sizes, config, mesh, draft_tp))
        self.compiled += 2 * built
        if built:
            self.costs.pop(key, None)
        return Programs(*pair, key)

    @staticmethod
    def _compile(args, sizes, config, mesh, draft_tp):
        prefill = functools.partial(
            prefill_program, **sizes, widths=config.widths, rows=row_defaults(config)
        )
        decode = functools.partial(decode_program, config=config, mesh=mesh, draft_tp=draft_tp)
        state = jax.eval_shape(prefill, *args)
        check_fits(state, mesh, state.tokens.shape[0], sizes["capacity"])
        steps = jax.ShapeDtypeStruct((), np.int32)
        inputs = _inputs_shape(config, None)
        if mesh is None:
            prefill_jit, decode_jit = jax.jit(prefill), jax.jit(decode, donate_argnums=(2,))
        else:
            out = _readable_shardings(state, mesh, draft_tp)
            state = jax.tree.map(
                lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), state, out
            )
            replicated = NamedSharding(mesh, PartitionSpec())
            steps = jax.ShapeDtypeStruct((), np.int32, sharding=replicated)
            inputs = _inputs_shape(config, replicated)
            shardings_of = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
            prefill_jit = jax.jit(prefill, in_shardings=shardings_of(args), out_shardings=out)
            decode_args = (args[0], args[1], state, steps, steps, inputs)
            decode_jit = jax.jit(
                decode,
                in_shardings=shardings_of(decode_args),
                out_shardings=(out, replicated),
                donate_argnums=(2,),
            )
        target, drafter = args[0], args[1]
        return (
            prefill_jit.lower(*args).compile(),
            decode_jit.lower(target, drafter, state, steps, steps, inputs).compile(),
        )

    def program(self, fn, args, static: dict | None = None, donate: tuple[int, ...] = ()):
        """``(executable, built)``: ``fn`` compiled for ``args`` (arrays or ShapeDtypeStructs,
        their shardings kept) and ``static`` keywords, kept like the generation programs (the
        loops with a draft on its own devices and SSD's rounds run their programs this way)."""
        static = static or {}
        key = ("program", fn, signature(args), tuple(sorted(static.items())), donate)
        jitted = lambda: jax.jit(functools.partial(fn, **static), donate_argnums=donate)
        program, built = self.kept.get(key, lambda: jitted().lower(*args).compile())
        self.compiled += built
        return program, built

    def prefill_rows(self, args, sizes: dict, config, mesh):
        """The compiled :func:`~specjax.decode.slots.prefill_rows` for ``args = (target,
        drafter, prompts, prompt_lengths, words, seed, seeds, seeded[, rows, limits])``, kept
        like the generation programs (one per prompt shape: the slots' row count is not in
        it)."""
        key = ("rows", signature(args), tuple(sorted(sizes.items())), config.widths, mesh)
        build = lambda: _compile_rows(args, sizes, config)
        program, built = self.kept.get(key, build)
        self.compiled += built
        return program

    def scatter(self, args, axes: tuple, mesh):
        """The compiled :func:`~specjax.decode.slots.scatter_program` for ``args = (state,
        small, slots)`` (the state donated) and the leaves' row ``axes``."""
        key = ("scatter", signature(args), axes, mesh)
        program, built = self.kept.get(key, lambda: _compile_scatter(args, axes, mesh))
        self.compiled += built
        return program

    def grow(self, args, mesh):
        """The compiled :func:`~specjax.decode.slots.grow_program` for ``args = (state,
        empty)`` (``empty`` donated), kept like the others."""
        key = ("grow", signature(args), mesh)
        program, built = self.kept.get(key, lambda: _compile_grow(args, mesh))
        self.compiled += built
        return program

    def clear(self) -> None:
        """Drops every kept program."""
        self.kept.clear()
        self.costs.clear()


def _compile_grow(args, mesh):
    if mesh is None:
        return jax.jit(grow_program, donate_argnums=(1,)).lower(*args).compile()
    shardings_of = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
    jitted = jax.jit(
        grow_program,
        in_shardings=shardings_of(args),
        out_shardings=shardings_of(args[1]),  # the larger state's layout
        donate_argnums=(1,),
    )
    return jitted.lower(*args).compile()


def row_defaults(config: DecodeConfig):
    """``(sampling, max_new_tokens)`` the state carries per row where ``config.rows``, else
    None."""
    return (config.sampling, config.max_new_tokens) if config.rows else None


def _compile_rows(args, sizes, config):
    # (on a mesh the arguments' own layouts are the inputs'; the scatter lays the rows out)
    rows = functools.partial(prefill_rows, **sizes, widths=config.widths)
    return jax.jit(rows).lower(*args).compile()


def _compile_scatter(args, axes, mesh):
    scatter = functools.partial(scatter_program, axes=axes)
    if mesh is None:
        return jax.jit(scatter, donate_argnums=(0,)).lower(*args).compile()
    shardings_of = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
    out = shardings_of(args[0])  # the layout decode reads and writes
    jitted = jax.jit(scatter, in_shardings=shardings_of(args), out_shardings=out, donate_argnums=0)
    return jitted.lower(*args).compile()


def _inputs_shape(config: DecodeConfig, sharding) -> widths.WidthInputs | None:
    """The abstract :class:`~specjax.decode.widths.WidthInputs` argument (None without widths)."""
    if not config.widths:
        return None
    shape = lambda s, d: jax.ShapeDtypeStruct(s, d, sharding=sharding)
    return widths.WidthInputs(shape((len(config.widths),), np.float32), shape((), np.int32))


PROGRAMS = _Programs()
"""This process's compiled generation programs (``PROGRAMS.compiled`` counts compilations)."""
