"""Where a width policy's step costs come from: given, read from a file, measured once, or guessed.

A :class:`~specjax.decode.widths.Goodput` policy weighs each width's expected tokens against its
cost relative to a one-token step. The costs, in order:

1. ``DecodeConfig.width_costs`` when given (the CLI fills them from a costs file,
   :func:`lookup`, that ``python -m specjax.calibrate`` writes per pair, hardware and batch
   bucket: :func:`record`);
2. else, where the output cannot depend on the widths, **measured once per compiled program**
   (:func:`measure`): at temperature 0 (every width emits the greedy tokens) and with the
   ``gumbel`` verifier (every width emits the autoregressive sample of the seed);
3. else :func:`~specjax.decode.widths.guess_costs`, which no clock reads: at temperature > 0 a
   verifier other than ``gumbel`` spends randomness differently at each width, so widths chosen
   from a clock would make the same seed give different text from run to run.

Nothing here learns across generations: a program's measured costs are a property of the
program on this machine, and a policy's acceptance estimates start from the default prior in
every generation.
"""

from __future__ import annotations

import datetime
import json
import os
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

from specjax import verify
from specjax.decode.config import DecodeConfig
from specjax.decode.widths import Fixed, RandomWidths, policy_of

ROUNDS, STEPS, SECONDS = 5, (8, 256), 0.02
"""Rounds of :func:`measure` (the median of their per-round ratios), the bounds of the extra
steps of a round's long call, and how long a width-0 long call should run (sub-millisecond
steps need many for the call's own cost and the machine's jitter to cancel)."""

FORMAT = "specjax-width-costs/1"
"""The ``format`` of a costs file."""


def reads_costs(config: DecodeConfig) -> bool:
    """Whether the config's width policy weighs costs (not ``random`` or ``fixed``)."""
    return bool(config.widths) and not isinstance(
        policy_of(config.width_policy), RandomWidths | Fixed
    )


def may_measure(config: DecodeConfig) -> bool:
    """Whether costs may come from a clock: the policy reads them, none are given, and the
    output does not depend on the widths (temperature 0, or a coupled verifier: ``gumbel``)."""
    invariant = config.greedy or config.verifier in verify.COUPLED_VERIFIERS
    return reads_costs(config) and not config.width_costs and invariant


def _agreed(seconds: float) -> float:
    """``seconds`` as process 0 measured them, so every process takes the same widths."""
    if jax.process_count() == 1:
        return seconds
    return float(multihost_utils.broadcast_one_to_all(np.float32(seconds)))


def measure(run, state, restart=None, rounds: int = ROUNDS):
    """Times ``run``'s decode program forced at each width: per round and width, a call of
    ``1 + n`` steps less a one-step call (the call's own overhead cancels) per extra step, over
    width 0's of the same round; the costs are each width's median ratio. ``n`` is sized from a
    pilot so that a width-0 long call runs about :data:`SECONDS`.

    Args:
      run: a :class:`~specjax.decode.loop.Run` with ``config.widths``.
      state: a state of its program, donated.
      restart: gives a fresh state once every row of the current one is done (a generation
        measures on a scratch prefill of its prompts); None: stop there (a batch job measures
        on its live slots), keeping the rounds so far.

    Returns:
      ``(costs, state)``: float32 ``[Y]`` (None if no round finished) and the last state.
    """
    n = len(run.config.widths)
    seconds = [[] for _ in range(n)]

    def call(state, k: int, i: int):
        before = jax.device_get(state.control.steps)
        start = time.perf_counter()
        state = run.decode(state, k, force=i)
        steps, done = jax.device_get((state.control.steps, state.done))
        seconds = _agreed(time.perf_counter() - start)
        return state, seconds, int(np.sum(steps - before)), bool(np.all(done))

    for i in range(n):  # untimed: a width's first run is slower
        state, *_ = call(state, 1, i)
    state, short, _, _ = call(state, 1, 0)  # the pilot: a width-0 step's time
    state, long, n_long, done = call(state, 1 + STEPS[0], 0)
    per_step = max(long - short, 1e-6) / max(n_long - 1, 1)
    steps = int(np.clip(np.ceil(SECONDS / per_step), *STEPS))
    if done:
        if restart is None:
            return None, state
        state = restart()
    for _ in range(rounds):
        for i in range(n):
            for _ in range(2):  # a pair cut short by the rows finishing is measured again
                state, short, n_short, _ = call(state, 1, i)
                state, long, n_long, done = call(state, 1 + steps, i)
                measured = n_long > n_short
                if measured:
                    seconds[i].append(max(long - short, 1e-9) / (n_long - n_short))
                if done:
                    if restart is None:
                        return _costs(seconds), state
                    state = restart()
                if measured:
                    break
    return _costs(seconds), state


def _costs(seconds: list[list[float]]):
    """The median over rounds of each width's time over width 0's (drafting widths at least 1:
    a cheaper reading is noise); None without a complete round."""
    rounds = min(map(len, seconds))
    if rounds == 0:
        return None
    base = np.asarray(seconds[0][:rounds])
    costs = [1.0] + [float(np.median(np.asarray(t[:rounds]) / base)) for t in seconds[1:]]
    return np.maximum(np.asarray(costs, np.float32), 1.0).astype(np.float32)


def hardware() -> str:
    """What the costs were measured on: device kind and count, e.g. ``"NVIDIA H200 x1"``."""
    devices = jax.devices()
    return f"{devices[0].device_kind} x{len(devices)}"


def _entries(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON ({e}); delete it or name another file") from None
    keys = ("pair", "hardware", "batch", "widths", "costs")
    entries = data.get("entries") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or not isinstance(entries, list)
        or not all(isinstance(e, dict) and all(k in e for k in keys) for e in entries)
    ):
        raise ValueError(
            f"{path} is not a specjax costs file (format {FORMAT!r}); delete it or name "
            "another file"
        )
    return entries


def _key(entry: dict) -> tuple:
    """What a costs file keys an entry by: pair, hardware, batch bucket, widths."""
    return entry["pair"], entry["hardware"], entry["batch"], tuple(entry["widths"])


def lookup(path: str, pair: str, batch: int, widths: tuple[int, ...]) -> tuple[float, ...]:
    """The costs a costs file holds for ``pair`` on this hardware at ``batch`` rows (a batch
    bucket) and ``widths``; raises ValueError naming the command that measures them."""
    for e in _entries(path):
        if _key(e) == (pair, hardware(), batch, tuple(widths)):
            return tuple(float(c) for c in e["costs"])
    raise ValueError(
        f"{path} has no width costs for {pair!r} on {hardware()} at batch {batch} and widths "
        f"{widths}: measure them with python -m specjax.calibrate and the same --config flags"
    )


def record(path: str, pair: str, batch: int, widths: tuple[int, ...], costs) -> dict:
    """Writes (atomically) the costs of ``pair`` on this hardware at ``batch`` and ``widths``
    into the costs file at ``path``, replacing an entry with the same key; returns the entry."""
    entry = dict(
        pair=pair,
        hardware=hardware(),
        batch=int(batch),
        widths=[int(w) for w in widths],
        costs=[round(float(c), 4) for c in costs],
        measured=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
    kept = [e for e in _entries(path) if _key(e) != _key(entry)]
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(dict(format=FORMAT, entries=[*kept, entry]), f, indent=1)
    os.replace(tmp, path)
    return entry
