"""Run on 8 emulated CPU devices (a subprocess of tests/test_ssd.py): SSD rounds with the target
on device 0 and the draft on device 1, dispatched from the host, give the fused one-device
oracle's tokens; with latency injected into both sides a round costs about the larger side.

  python -m tests.ssd_check equal     # host loop == fused oracle, T = 0 and T = 1, both backups
  python -m tests.ssd_check equal_t1  # the same at T = 1 with the jit backup
  python -m tests.ssd_check overlap   # sleep-injected sides overlap
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp

from specjax import sampling
from specjax.decode import DecodeConfig
from specjax.decode.ssd import generate_ssd
from specjax.decode.ssd.drafter import SSDConfig, SSDDrafter
from specjax.decode.ssd.timing import Latencies, ssd_round
from specjax.testing import pair

PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [12]]


def equal(cases=((0.0, "jit"), (0.0, "ngram"), (1.0, "jit"), (1.0, "ngram"))) -> None:
    target, draft = pair(vocab=48, sigma=0.02)
    devices = (jax.devices()[0], jax.devices()[1])
    for temperature, backup in cases:
        params = sampling.SamplingParams(temperature)
        drafter = SSDDrafter(
            draft, ssd=SSDConfig(fan_out=(2, 2, 1, 1, 2), backup=backup), sampling=params
        )
        verifier = "greedy" if temperature == 0 else "block"
        cfg = DecodeConfig(verifier, params, 24)
        fused = generate_ssd(target, PROMPTS, cfg, drafter, seed=3)
        split = generate_ssd(target, PROMPTS, cfg, drafter, seed=3, devices=devices)
        assert fused.tokens == split.tokens, (temperature, backup)
        assert fused.ssd == split.ssd, (fused.ssd, split.ssd)
    print("equal-ok")


CALLS = {"pauses": 0}


def _slept(fn, delay: float):
    """``fn`` whose program ends in a host callback that sleeps ``delay`` seconds (its first
    integer output depends on the callback, so the call completes only after the sleep)."""

    def pause(x):
        CALLS["pauses"] += 1
        time.sleep(delay)
        return x

    def slow(*args, **kwargs):
        out = fn(*args, **kwargs)
        leaves, tree = jax.tree.flatten(out)
        i = next(i for i, x in enumerate(leaves) if x.dtype == jnp.int32)
        t = jax.pure_callback(pause, jax.ShapeDtypeStruct((), jnp.int32), jnp.sum(leaves[i]))
        leaves[i] = jnp.where(t == jnp.iinfo(jnp.int32).min, leaves[i] + 1, leaves[i])
        return jax.tree.unflatten(tree, leaves)

    return slow


def overlap() -> None:
    """Verification (target device) and build (draft device) each sleep ``delay`` in a host
    callback, which uses no core: run one after the other a round costs about 2 * delay; with
    the sides on their own devices, dispatched asynchronously, about delay."""
    from specjax.decode.ssd import rounds as ssd

    delay = 0.2
    target, draft = pair(vocab=48, sigma=0.02)
    params = sampling.SamplingParams(0.0)
    drafter = SSDDrafter(draft, ssd=SSDConfig(fan_out=(2, 2, 1, 1, 2)), sampling=params)
    cfg = DecodeConfig("greedy", params, 24)
    ssd.verify_round = _slept(ssd.verify_round, delay)
    ssd.build = _slept(ssd.build, delay)
    per_round = {}
    for name, devices in (("split", jax.devices()[:2]), ("shared", [jax.devices()[0]] * 2)):
        CALLS["pauses"] = 0
        out = generate_ssd(target, PROMPTS, cfg, drafter, seed=3, devices=tuple(devices))
        rounds = CALLS["pauses"] / 2  # verify and build each pause once per round
        per_round[name] = out.metrics.seconds / rounds
    print({k: round(v, 3) for k, v in per_round.items()})
    assert per_round["split"] < 1.4 * delay < 0.75 * per_round["shared"], per_round
    # The latency model (scripts/simulate_ssd.py) from per-call times, waited for one by one.
    profile = {}
    generate_ssd(target, PROMPTS, cfg, drafter, seed=3, devices=tuple(jax.devices()[:2]),
                 profile=profile)  # fmt: skip
    mean = lambda name: sum(profile[name]) / len(profile[name])
    lat = Latencies(mean("verify"), 0.0, 0.0, mean("build"), 0.0, serve=mean("serve"))
    predicted = ssd_round(lat, 4, hit=True)
    error = predicted / per_round["split"] - 1
    print(f"model {predicted:.3f}s per round, measured {per_round['split']:.3f}s ({error:+.1%})")
    assert abs(error) < 0.15, (predicted, per_round)
    print(f"overlap-ok {per_round['split']:.3f}s per round, sides {delay}s each")


if __name__ == "__main__":
    assert len(jax.devices()) >= 2, jax.devices()
    checks = {"equal": equal, "equal_t1": lambda: equal(((1.0, "jit"),)), "overlap": overlap}
    checks[sys.argv[1]]()
