"""Speculative decoding with the draft on its own devices (a sub-mesh of its own).

One ``jax.jit`` program spans one set of devices, so with the draft on separate devices a step
is four compiled programs: split keys (target devices), propose (draft devices), verify + commit
(target devices), commit the draft cache (draft devices), with device-to-device transfers of the
draft ``[B, K, L]`` tokens, their ``[B, K, L, V]`` laws and the ``[B]`` outcome in between, and
one read of the ``[B]`` done flags per step. The arithmetic is the same as the single-program
loop's (same keys, same functions), so the tokens are too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import jax
import numpy as np

from specjax import sharding
from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.config import DecodeConfig
from specjax.decode.inputs import couple, prepare
from specjax.decode.loop import Generation, outputs
from specjax.decode.metrics import Metrics, Timing
from specjax.decode.programs import PROGRAMS, constrain_state
from specjax.decode.state import check_target
from specjax.decode.step import draft_keys, init_state, split_keys, verify_and_commit
from specjax.drafters.base import Drafter, draws_with_replacement, near
from specjax.models.pure import PureModel


def split_devices(target_shape, draft_shape, axis_names=("data", "model")):
    """``(target_mesh, draft_mesh)`` over disjoint devices: the target takes the first
    ``prod(target_shape)`` devices, the draft the next ``prod(draft_shape)``."""
    t_shape = sharding.parse_mesh_shape(target_shape)
    d_shape = sharding.parse_mesh_shape(draft_shape)
    devices = jax.devices()
    n_t, n_d = int(np.prod(t_shape)), int(np.prod(d_shape))
    if n_t + n_d > len(devices):
        raise ValueError(
            f"mesh_shape {target_shape} ({n_t} devices) + draft_mesh_shape {draft_shape} "
            f"({n_d} devices) need {n_t + n_d} devices but {len(devices)} are available"
        )
    return (
        sharding.make_mesh(t_shape, axis_names, devices[:n_t]),
        sharding.make_mesh(d_shape, axis_names, devices[n_t : n_t + n_d]),
    )


# The target's programs keep the state in the decode layout (rows over ``data``, the cache's KV
# heads over ``model``: programs.state_shardings), so each compiles once and takes its own output.


def _init_target(target, prompts, prompt_lengths, seed, *, capacity, buffer, draft_len, mesh):
    key = jax.random.key(seed)
    state = init_state(
        target,
        None,
        prompts,
        prompt_lengths,
        key,
        capacity=capacity,
        buffer=buffer,
        draft_len=draft_len,
    )
    return constrain_state(state, mesh, False)


def _init_draft(drafter, prompts, prompt_lengths, *, capacity):
    return drafter.init(prompts, prompt_lengths, capacity)


def _split(keys, *, mesh):
    # The keys alone: the state (the target's cache with it) goes through one program per step,
    # _verify, which donates it.
    keys, k_draft, k_verify = split_keys(keys, 3)
    rows = sharding.batch_sharding(mesh, keys.ndim)
    return jax.lax.with_sharding_constraint(keys, rows), k_draft, k_verify


def _verify(target, state, draft, key, *, config, replacement, mesh):
    out = verify_and_commit(target, state, draft, key, config, replacement=replacement)
    state, path, tau, _ = out
    return constrain_state(state, mesh, False), path, tau


def _propose(drafter, draft_state, keys, tokens, lengths):
    return drafter.propose(draft_state, keys, tokens, lengths)


def _commit(drafter, before, after, lengths, path, tau, active):
    return drafter.commit(before, after, lengths, path, tau, active)


DONATED = {_verify: (1,), _commit: (2,)}
"""The arguments a step's program donates: the target's state, so that its cache is updated in
place, and the draft state ``propose`` returned, which only its commit reads (the state from
before ``propose`` is read by the commit too, so the draft holds two caches between them)."""


class _Programs:
    """The step's programs, each compiled on its first call (kept in the process's one program
    cache, :data:`~specjax.decode.programs.PROGRAMS`) and then called directly: the loop's
    arguments keep their shapes and layouts, so later steps skip the signature lookup, a Python
    flatten of every parameter."""

    def __init__(self):
        self._executables: dict = {}

    def __call__(self, fn, *args, **static):
        executable = self._executables.get(fn)
        if executable is None:
            executable, _ = PROGRAMS.program(fn, args, static, DONATED.get(fn, ()))
            self._executables[fn] = executable
        return executable(*args)


def generate_on_submeshes(
    target: PureModel,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    drafter: Drafter,
    seed: int,
    mesh,
    draft_mesh,
    buckets: ShapeBuckets = DEFAULT,
) -> Generation:
    """:func:`specjax.decode.generate` with the target on ``mesh`` and a model drafter on
    ``draft_mesh`` (both already placed there). Same tokens as the single-program loop;
    ``metrics.seconds`` excludes compilation (a warm-up step compiles every program first)."""
    multiple = int(np.lcm(*(sharding.axis_size(m, "data") for m in (mesh, draft_mesh))))
    # Every step drafts at full width and the draft reads the prompt at init: never far behind.
    drafter = near(couple(drafter, config), ())
    batch = prepare(target, drafter, prompts, config, buckets, multiple)
    padded, lengths, capacity, buffer = batch.prompts, batch.lengths, batch.capacity, batch.buffer
    sharding.check_model(target.config, mesh)
    on = lambda m: lambda x: jax.device_put(x, sharding.batch_sharding(m, np.ndim(x)))
    to_t, to_d = on(mesh), on(draft_mesh)
    draft_rows = lambda ndim: sharding.batch_sharding(draft_mesh, ndim)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    replacement = draws_with_replacement(drafter)

    call = _Programs()

    def run(max_steps: int | None):
        state = call(
            _init_target,
            target,
            to_t(padded),
            to_t(lengths),
            jax.device_put(np.int32(seed), replicated),
            capacity=capacity,
            buffer=buffer,
            draft_len=drafter.draft_len,
            mesh=mesh,
        ).replace(done=to_t(~batch.active))
        draft_state = call(_init_draft, drafter, to_d(padded), to_d(lengths), capacity=capacity)
        steps = 0
        while max_steps is None or steps < max_steps:
            keys, k_draft, k_verify = call(_split, state.keys, mesh=mesh)
            k_draft = draft_keys(state, config, k_draft)
            state = state.replace(keys=keys)
            # Copies on the draft's devices (never aliases: _verify donates the state).
            lengths_d = jax.device_put(state.lengths, draft_rows(1), may_alias=False)
            active_d = to_d(~state.done)
            draft, after = call(
                _propose, drafter, draft_state, to_d(k_draft), to_d(state.tokens), lengths_d
            )
            state, path, tau = call(
                _verify,
                target,
                state,
                jax.tree.map(to_t, draft),
                k_verify,
                config=config,
                replacement=replacement,
                mesh=mesh,
            )
            draft_state = call(
                _commit,
                drafter,
                draft_state,
                after,
                lengths_d,
                to_d(path),
                to_d(tau),
                active_d,
            )
            steps += 1
            if bool(np.all(jax.device_get(state.done))):
                break
        return state

    before = PROGRAMS.compiled
    start = time.perf_counter()
    run(1)  # compiles the programs
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    state = run(None)
    seconds = time.perf_counter() - start
    state = jax.device_get(state.replace(target_cache=None))
    check_target(state.stats, range(batch.rows))
    metrics = Metrics.from_state(state, Timing(seconds, compile_seconds))
    return Generation(outputs(state, batch.rows), metrics, PROGRAMS.compiled - before)
