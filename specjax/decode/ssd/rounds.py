"""SSD generations: per round the draft serves, the target verifies, the draft builds.

A round is three functions (:func:`ssd_round`): ``drafter.serve`` (draft devices: look the last
outcome up in the speculation cache, or run the backup), :func:`verify_round` (target devices:
one tree forward, the verifier, the commit) and ``drafter.build`` (draft devices: the next cache,
while the target verifies). Two ways to run them, with identical tokens for the same seed:

* :func:`generate_ssd` with ``devices=None``: one compiled program, the rounds fused under
  ``lax.while_loop`` on one device (no overlap; the oracle, and the default CLI run);
* :func:`generate_ssd` with ``devices=(target_device, draft_device)``: separate compiled programs
  dispatched asynchronously from the host, so build runs on the draft device while verification
  runs on the target device. The host never waits inside a round: it reads ``done`` of the round
  ``done_lag`` rounds back (later rounds of finished rows change nothing).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.config import DecodeConfig
from specjax.decode.inputs import check_seed, on_device, prepare
from specjax.decode.loop import Generation, outputs
from specjax.decode.metrics import Metrics, Timing
from specjax.decode.programs import PROGRAMS
from specjax.decode.ssd.drafter import SSDDrafter
from specjax.decode.ssd.speculation import FROM_CACHE, Outcome, SSDStats
from specjax.decode.state import DecodeState, check_target
from specjax.decode.step import init_state, split_keys, verify_and_commit
from specjax.models.pure import PureModel, as_pure


def verify_round(
    target: PureModel, state: DecodeState, draft, config: DecodeConfig
) -> tuple[DecodeState, Outcome]:
    """The target's half of a round: verify ``draft`` (K = 1) and commit; the outcome for the
    draft devices."""
    keys, k_verify = split_keys(state.keys, 2)
    new, _, tau, _ = verify_and_commit(target, state.replace(keys=keys), draft, k_verify, config)
    last = jnp.take_along_axis(new.tokens, (new.lengths - 1)[:, None], axis=1)[:, 0]
    return new, Outcome(tau.astype(jnp.int32), last, new.lengths, new.done)


def ssd_round(target, drafter: SSDDrafter, state, dstate, outcome, config):
    """serve -> verify -> build: one round, the three functions every SSD run calls."""
    draft, dstate = drafter.serve(dstate, outcome)
    state, outcome = verify_round(target, state, draft, config)
    return state, drafter.build(dstate), outcome


def init_target(target, prompts, lengths, active, key, *, capacity, buffer, draft_len):
    """The target's :class:`DecodeState` after prefill (padding rows start done)."""
    state = init_state(
        target, None, prompts, lengths, key, capacity=capacity, buffer=buffer, draft_len=draft_len
    )
    return state.replace(done=~active)


def init_draft(drafter: SSDDrafter, prompts, lengths, active, key, *, capacity, buffer):
    """The draft state after prefill and the outcome the first serve starts from."""
    dstate, outcome = drafter.init(prompts, lengths, key, capacity, buffer)
    return dstate.replace(done=~active), dataclasses.replace(outcome, done=~active)


def _keys(seed):
    """(target key, draft key): independent streams from one seed."""
    key = jax.random.key(seed)
    return key, jax.random.fold_in(key, 0x55D)


def fused_program(
    target, drafter, prompts, lengths, active, seed, *, config, capacity, buffer, max_rounds
):
    """Prefill and every round under one ``lax.while_loop`` (one device, no overlap)."""
    k_target, k_draft = _keys(seed)
    sizes = dict(capacity=capacity, buffer=buffer)
    state = init_target(
        target, prompts, lengths, active, k_target, **sizes, draft_len=drafter.draft_len
    )
    dstate, outcome = init_draft(drafter, prompts, lengths, active, k_draft, **sizes)

    def body(carry):
        rounds, state, dstate, outcome = carry
        return (rounds + 1, *ssd_round(target, drafter, state, dstate, outcome, config))

    cond = lambda c: (c[0] < max_rounds) & ~jnp.all(c[1].done)
    _, state, dstate, outcome = jax.lax.while_loop(
        cond, body, (jnp.int32(0), state, dstate, outcome)
    )
    _, dstate = drafter.serve(dstate, outcome)  # counts the last outcomes
    return state, dstate.stats


def compiled(fn, *args, static: dict | None = None, donate: tuple[int, ...] = ()):
    """``fn`` compiled for ``args`` (arrays or ShapeDtypeStructs) and ``static`` keywords, kept
    in the process's one program cache (:data:`~specjax.decode.programs.PROGRAMS`), so a seen
    shape costs nothing. Returns ``(executable, seconds compiling)``."""
    start = time.perf_counter()
    program, built = PROGRAMS.program(fn, args, static, donate)
    return program, (time.perf_counter() - start if built else 0.0)


def serve(drafter, dstate, outcome):
    """``drafter.serve`` as a function of arrays (what the draft devices run first)."""
    return drafter.serve(dstate, outcome)


def build(drafter, dstate):
    """``drafter.build`` as a function of arrays (what the draft devices run during verify)."""
    return drafter.build(dstate)


def _on(device, tree):
    """ShapeDtypeStructs of ``tree`` placed on ``device``."""
    where = jax.sharding.SingleDeviceSharding(device)
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=where), tree)


def host_loop(target, drafter, batch, seed, config, devices, done_lag: int = 4, profile=None):
    """The rounds as separate programs on ``devices = (target_device, draft_device)``,
    dispatched without blocking. Returns ``(state, stats, seconds compiling)``.

    With a ``profile`` dict, every call is waited for and timed instead (no overlap: for the
    latency model only): ``profile[name]`` lists the seconds of each ``serve`` / ``verify`` /
    ``build`` call, and ``profile["hit"]`` whether each round was served from the cache.
    """
    t_dev, d_dev = devices
    on_t = lambda x: jax.device_put(x, t_dev)
    on_d = lambda x: jax.device_put(x, d_dev)
    target, drafter = on_t(target), on_d(drafter)
    k_target, k_draft = _keys(np.int32(seed))
    sizes = dict(capacity=batch.capacity, buffer=batch.buffer)
    inputs = (batch.prompts, batch.lengths, batch.active)
    t_args = (target, *map(on_t, inputs), on_t(k_target))
    d_args = (drafter, *map(on_d, inputs), on_d(k_draft))
    t_init, c1 = compiled(init_target, *t_args, static=dict(**sizes, draft_len=drafter.draft_len))
    d_init, c2 = compiled(init_draft, *d_args, static=sizes)
    state, (dstate, outcome) = t_init(*t_args), d_init(*d_args)
    draft_s, dstate_s = jax.eval_shape(serve, drafter, dstate, outcome)
    serve_x, c3 = compiled(serve, drafter, dstate, outcome, donate=(1,))
    verify_x, c4 = compiled(
        verify_round, target, state, _on(t_dev, draft_s), static=dict(config=config), donate=(1,)
    )
    build_x, c5 = compiled(build, drafter, _on(d_dev, dstate_s), donate=(1,))
    pending = collections.deque()
    timed = _timer(profile)
    for _ in range(config.max_new_tokens):  # every round emits >= 1 token per active row
        draft, dstate = timed("serve", serve_x, drafter, dstate, outcome)
        if profile is not None:
            hit = bool(np.all(np.asarray(dstate.source) == FROM_CACHE))
            profile.setdefault("hit", []).append(hit)
        state, outcome_t = timed("verify", verify_x, target, state, on_t(draft))
        dstate = timed("build", build_x, drafter, dstate)
        outcome = on_d(outcome_t)
        pending.append(outcome_t.done)
        if len(pending) > done_lag and np.all(np.asarray(pending.popleft())):
            break
    _, dstate = serve_x(drafter, dstate, outcome)
    return state, dstate.stats, c1 + c2 + c3 + c4 + c5


def _timer(profile):
    """``timed(name, fn, *args)``: ``fn(*args)``; with a profile dict, waited for and timed."""

    def timed(name, fn, *args):
        if profile is None:
            return fn(*args)
        start = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        profile.setdefault(name, []).append(time.perf_counter() - start)
        return out

    return timed


def generate_ssd(
    target: PureModel,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    drafter: SSDDrafter,
    seed: int = 0,
    devices: tuple | None = None,
    buckets: ShapeBuckets = DEFAULT,
    done_lag: int = 4,
    profile: dict | None = None,
) -> Generation:
    """Speculative speculative decoding of every prompt.

    Args:
      target: the target model; drafter: the :class:`SSDDrafter`.
      prompts: token ids per row.
      config: a chain verifier (``greedy``, ``token`` or ``block``), sampling and length.
      seed: the PRNG seed (target and draft draw from independent streams of it).
      devices: ``(target_device, draft_device)`` to overlap drafting with verification, or
        None to run the fused rounds on the default device.
      buckets: shape buckets for the prompts and batch.
      done_lag: with devices, how many rounds behind the host reads ``done``.
      profile: with devices, a dict that receives per-call seconds (see :func:`host_loop`);
        the calls are then waited for one by one.

    Returns:
      A :class:`Generation` whose ``ssd`` holds the SSD counters (:func:`ssd_counts`; rates
      with :func:`ssd_rates`).
    """
    if config.multipath or not config.speculative:
        raise ValueError(
            f"SSD serves one chain per row: use verifier greedy, token or block, not "
            f"{config.verifier!r}"
        )
    drafter.ssd.check_vocab(drafter.vocab_size)  # before any program is compiled
    target = as_pure(target)
    batch = prepare(target, drafter, prompts, config, buckets)
    check_seed(seed)
    start = time.perf_counter()
    if devices is None:
        inputs = (batch.prompts, batch.lengths, batch.active, np.int32(seed))
        args = on_device((target, drafter), inputs)
        static = dict(config=config, capacity=batch.capacity, buffer=batch.buffer)
        program, compile_seconds = compiled(
            fused_program, *args, static=dict(**static, max_rounds=config.max_new_tokens)
        )
        start += compile_seconds
        state, stats = program(*args)
    else:
        state, stats, compile_seconds = host_loop(
            target, drafter, batch, seed, config, devices, done_lag, profile
        )
        start += compile_seconds
    counters = jax.device_get(state.replace(target_cache=None, draft_state=None))
    stats = jax.device_get(stats)
    seconds = time.perf_counter() - start
    check_target(counters.stats, range(batch.rows))
    metrics = Metrics.from_state(counters, Timing(seconds, compile_seconds))
    rows = batch.rows
    return Generation(outputs(counters, rows), metrics, ssd=ssd_counts(stats, rows))


def ssd_counts(stats: SSDStats, rows: int | None = None) -> dict[str, int]:
    """The :class:`SSDStats` counters summed over the first ``rows`` rows."""
    return {
        f.name: int(np.sum(np.asarray(getattr(stats, f.name))[:rows]))
        for f in dataclasses.fields(stats)
    }


def ssd_rates(counts: dict[str, int] | Sequence[dict[str, int]]) -> dict[str, float]:
    """The SSD metrics from :func:`ssd_counts` (of one generation, or summed over several).

    * ``ssd_hit_rate``: rounds whose outcome (k, b) was in the cache / rounds with a cache;
    * ``ssd_bonus_accuracy``: of the rounds whose k had a fan-out, those whose bonus was guessed;
    * ``ssd_k_coverage``: rounds whose k had a fan-out / rounds with a cache;
    * ``ssd_served_from_cache``: rounds served from the cache / all rounds;
    * ``ssd_accepted_length_from_cache`` / ``_from_backup``: mean accepted tokens per round
      served from the cache / by the backup;
    * ``ssd_rounds``: rounds over all rows.
    """
    if isinstance(counts, dict):
        counts = [counts]
    total = {k: sum(c[k] for c in counts) for k in counts[0]}
    ratio = lambda a, b: a / b if b else float("nan")
    backup_rounds = total["rounds"] - total["from_cache"]
    return {
        "ssd_hit_rate": ratio(total["hits"], total["cached"]),
        "ssd_bonus_accuracy": ratio(total["hits"], total["covered"]),
        "ssd_k_coverage": ratio(total["covered"], total["cached"]),
        "ssd_served_from_cache": ratio(total["from_cache"], total["rounds"]),
        "ssd_accepted_length_from_cache": ratio(total["tau_from_cache"], total["from_cache"]),
        "ssd_accepted_length_from_backup": ratio(total["tau_from_backup"], backup_rounds),
        "ssd_rounds": total["rounds"],
    }


def ssd_table(rates: dict[str, float]) -> str:
    """The SSD rates as lines under the metrics table."""
    names = {
        "ssd_hit_rate": "SSD cache hit rate",
        "ssd_bonus_accuracy": "SSD bonus-guess accuracy",
        "ssd_served_from_cache": "SSD rounds served from cache",
        "ssd_accepted_length_from_cache": "SSD accepted length, cache",
        "ssd_accepted_length_from_backup": "SSD accepted length, backup",
    }
    return "\n".join(f"{label:<32}{rates[key]:.3f}" for key, label in names.items())


def ssd_devices(where: str):
    """``(target_device, draft_device)`` for ``ssd_draft_device``: None (``""``: one device,
    fused rounds), the next device (``next``) or the host CPU (``cpu``)."""
    if not where:
        return None
    target = jax.devices()[0]
    if where == "cpu":
        return target, jax.devices("cpu")[0]
    if len(jax.devices()) < 2:
        raise ValueError(
            "ssd_draft_device=next needs a second device; set num_cpu_devices=2 to emulate one "
            "or use ssd_draft_device=cpu"
        )
    return target, jax.devices()[1]
