r"""Predicts SSD vs SD vs autoregressive tokens/s from per-call latencies and per-round rates
(:mod:`specjax.decode.ssd.timing`), measured here or projected for large models.

  python scripts/simulate_ssd.py                       # measure the Shakespeare pair, project 70B
  python scripts/simulate_ssd.py --measure=False       # the projection only

Measuring: SSD rounds run with every call waited for and timed (``generate_ssd(profile=...)``)
on one CPU device, which gives the per-call latencies of serve, verify and build and the hit rate;
plain SD gives its block efficiency. The model then predicts what the rounds would cost with the
draft on its own device. (The model is validated against latency-injected runs on two emulated
devices in ``tests/ssd_check.py overlap``: within 15%, measured -2% on 2026-11-23.)

Projection: Llama-3-70B (bf16, 141 GB) tensor-parallel on 4 H100s and a Llama-3.2-1B draft
(bf16, 2.5 GB) on a fifth, every call memory-bound (weights read once at 70% of HBM bandwidth,
plus a per-call overhead), L = 7 as in the paper's runs, over a grid of acceptance and hit rates.
"""

from __future__ import annotations

import datetime

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import jax
from absl import app, flags, logging

from specjax.decode import DecodeConfig, generate
from specjax.decode.ssd import generate_ssd, ssd_rates
from specjax.decode.ssd.drafter import SSDDrafter
from specjax.decode.ssd.fanout import geometric_fan_out
from specjax.decode.ssd.speculation import SSDConfig
from specjax.decode.ssd.timing import Latencies, Rates, predict, roofline_call
from specjax.drafters import ModelDrafter
from specjax.models import load_pair
from specjax.sampling import SamplingParams

_MEASURE = flags.DEFINE_bool("measure", True, "Measure the Shakespeare pair on this machine.")
_NEW_TOKENS = flags.DEFINE_integer("new_tokens", 128, "Tokens per measured generation.")
_BUDGET = flags.DEFINE_integer("budget", 10, "SSD branches per row C (geometric fan-out).")

H100_BANDWIDTH = 3.35e12  # bytes/s of HBM3 per H100 SXM
TARGET_70B, DRAFT_1B = 141e9, 2.5e9  # bf16 weight bytes
TP_OVERHEAD = 1.5e-3  # per verification: 80 layers x 2 all-reduces over NVLink (~10 us each)


def measured() -> tuple[Latencies, Rates, dict]:
    shipped = load_pair("shakespeare")
    target, draft, tokenizer = shipped.target, shipped.draft, shipped.tokenizer
    prompts = [tokenizer.encode("ROMEO:\n")]
    params, l_len, new = SamplingParams(0.0), 4, _NEW_TOKENS.value
    cfg = DecodeConfig("greedy", params, new)
    fan = geometric_fan_out(_BUDGET.value, l_len)
    drafter = SSDDrafter(draft, ssd=SSDConfig(fan_out=fan), sampling=params)
    device = jax.devices()[0]
    profile: dict = {}
    for _ in range(2):  # the first run compiles; keep the second's profile
        profile.clear()
        out = generate_ssd(target, prompts, cfg, drafter, devices=(device, device), profile=profile)
    sd = generate(
        target, prompts, cfg, ModelDrafter(draft, num_paths=1, draft_len=l_len, sampling=params)
    )
    sd = generate(
        target, prompts, cfg, ModelDrafter(draft, num_paths=1, draft_len=l_len, sampling=params)
    )
    ar = generate(target, prompts, DecodeConfig("autoregressive", params, new))
    ar = generate(target, prompts, DecodeConfig("autoregressive", params, new))
    mean = lambda xs: sum(xs) / max(len(xs), 1)
    hits = [t for t, h in zip(profile["serve"], profile["hit"], strict=True) if h]
    misses = [t for t, h in zip(profile["serve"], profile["hit"], strict=True) if not h]
    serve_hit = mean(hits)
    draft_step = max(mean(misses) - serve_hit, 0.0) / l_len if misses else 0.0
    lat = Latencies(
        verify=mean(profile["verify"]),
        target_step=ar.metrics.seconds / ar.metrics.generated_tokens,
        draft_step=draft_step,
        glue=mean(profile["build"]),
        tree_step=0.0,
        serve=serve_hit,
    )
    rates = Rates(
        l_len, sd.metrics.block_efficiency, out.metrics.block_efficiency,
        ssd_rates(out.ssd)["ssd_served_from_cache"],
    )  # fmt: skip
    observed = {
        "ar": ar.metrics.tokens_per_second,
        "sd": sd.metrics.tokens_per_second,
        "ssd one device, serialized": out.metrics.tokens_per_second,
    }
    return lat, rates, observed


def projection() -> str:
    verify = roofline_call(TARGET_70B, 4 * H100_BANDWIDTH) + TP_OVERHEAD
    step = roofline_call(DRAFT_1B, H100_BANDWIDTH)
    lat = Latencies(
        verify=verify, target_step=verify, draft_step=step, glue=step, tree_step=step,
        serve=1e-4, transfer=5e-5,
    )  # fmt: skip
    body = []
    for alpha in (0.6, 0.7, 0.8, 0.9):
        l_len = 7
        be = (1 - alpha ** (l_len + 1)) / (1 - alpha)
        for hit in (0.5, 0.7, 0.9):
            p = predict(lat, Rates(l_len, be, be, hit))
            body.append(
                [f"{alpha:.1f}", f"{hit:.1f}", f"{be:.2f}", f"{p['sd_over_ar']:.2f}x",
                 f"{p['ssd_over_ar']:.2f}x", f"{p['ssd_over_sd']:.2f}x",
                 "build" if p["build_bound"] else "verify"]
            )  # fmt: skip
    head = ["alpha", "hit rate", "BE (L=7)", "SD / AR", "SSD / AR", "SSD / SD", "SSD bound by"]
    return (
        f"Per call: verify {verify * 1e3:.1f} ms (4 x H100, TP), draft step {step * 1e3:.2f} ms, "
        f"build {lat.build(7) * 1e3:.1f} ms (glue + 7 tree levels).\n\n"
        + benchlib.markdown(head, body, left=0)
        + "\n\nThe paper reports up to 2x over SD (SGLang / vLLM, k = 6) and up to 5x over "
        "autoregressive decoding on this setup; the ceiling of this model is "
        f"1 + t_D / t_T = {1 + 7 * step / verify:.2f}x over SD at equal block efficiency and a "
        "hit rate of 1, so a 2x gain needs a slower SD baseline than the roofline assumes "
        "(e.g. per-token draft overheads of the serving engines) or a better BE under SSD."
    )


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    lines = [
        f"`{benchlib.command()}` on "
        f"{benchlib.machine()}; {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC.",
        "",
    ]
    if _MEASURE.value:
        lat, rates, observed = measured()
        p = predict(lat, rates)
        lines += [
            f"Shakespeare pair, T = 0, L = {rates.draft_len}, C = {_BUDGET.value}: verify "
            f"{lat.verify * 1e3:.2f} ms, build {lat.glue * 1e3:.2f} ms, serve (hit) "
            f"{lat.serve * 1e3:.2f} ms, draft step {lat.draft_step * 1e3:.2f} ms, target step "
            f"{lat.target_step * 1e3:.2f} ms; BE SD {rates.block_efficiency_sd:.2f}, BE SSD "
            f"{rates.block_efficiency_ssd:.2f}, served from cache {rates.hit_rate:.2f}.",
            "",
            benchlib.markdown(
                ["", "AR", "SD", "SSD, draft on its own device"],
                [
                    ["predicted tokens/s", f"{p['ar']:.0f}", f"{p['sd']:.0f}", f"{p['ssd']:.0f}"],
                    [
                        "measured tokens/s",
                        f"{observed['ar']:.0f}",
                        f"{observed['sd']:.0f}",
                        f"(one device: {observed['ssd one device, serialized']:.0f})",
                    ],
                ],
                left=1,
            ),
            "",
        ]
    lines.append(projection())
    print("\n".join(lines))


if __name__ == "__main__":
    app.run(main)
