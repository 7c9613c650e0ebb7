"""Sections on whole generations: speculative vs autoregressive on SmolLM2, and SSD with the
draft on the host CPU."""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

import benchlib
from benchlib import width_policies
from benchlib.accelerator.report import Column, Section
from benchlib.accelerator.shared import Bench, encode_chat
from benchlib.chat_prompts import CHATS, held_out
from specjax.decode import DecodeConfig, generate
from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.seams import Run
from specjax.decode.ssd import SSDConfig, SSDDrafter, generate_ssd, ssd_devices, ssd_rates
from specjax.decode.ssd.fanout import parse_fan_out
from specjax.drafters import FeatureDrafter, ModelDrafter, NgramDrafter
from specjax.models import (
    truncated,
)
from specjax.models.eagle import EagleConfig, EagleHead
from specjax.models.eagle_formats import load_head
from specjax.models.pure import PureModel
from specjax.sampling import SamplingParams


def _timed_generations(
    runs: dict[str, Callable], repeats: int, warm: bool = True
) -> dict[str, tuple[Any, float]]:
    """``name -> (last generation, median seconds)``: one warm-up each (compiles; ``warm``
    False: none, the programs being compiled and run already), then ``repeats`` interleaved
    rounds (:func:`benchlib.interleaved`)."""
    gens = {name: run() for name, run in runs.items()} if warm else {}

    def seconds(name: str) -> float:  # keeps the generation, returns its time
        gens[name] = runs[name]()
        return gens[name].metrics.seconds

    times = benchlib.interleaved(
        {name: (functools.partial(seconds, name), 1) for name in runs}, repeats
    )
    return {name: (gens[name], statistics.median(times[name])) for name in runs}


GEN_COLUMNS = [
    Column("temperature", "T", "g"),
    Column("prompt", "prompt"),
    Column("method", "method"),
    Column("tokens_per_s", "tok/s", ".1f"),
    Column("speedup", "speedup", ".2f"),
    Column("block_efficiency", "block eff.", ".2f"),
    Column("width_steps", "steps per width"),
    Column("width_costs", "width costs"),
    Column("forced_ms", "ms per step forced to each width"),
    Column("same_as_ar", "= AR (T = 0)"),
]


def _gen_rows(
    sec: Section,
    temp: float,
    prompt: str,
    timed: dict,
    new: int,
    adaptive: dict | None = None,
) -> None:
    """One row per method; ``adaptive``: method -> its :func:`_adaptive_columns`."""
    ar_gen, ar_s = timed["autoregressive"]
    for name, (gen, seconds) in timed.items():
        m = gen.metrics
        row = dict(
            temperature=temp,
            prompt=prompt,
            method=name,
            seconds=seconds,
            tokens_per_s=new / seconds,
            speedup=ar_s / seconds,
            block_efficiency=m.block_efficiency,
            width_steps=_width_steps(m.width_steps),
            **(adaptive or {}).get(name, {}),
            same_as_ar=(gen.tokens == ar_gen.tokens) if temp == 0 else None,
        )
        if gen.ssd is not None:
            row["ssd_hit_rate"] = ssd_rates(gen.ssd)["ssd_hit_rate"]
        sec.row(**row)


def _width_steps(steps: dict) -> str | None:
    """``{0: 12, 4: 30}`` as ``0: 12, 4: 30`` (None where the width was fixed)."""
    return ", ".join(f"{w}: {n}" for w, n in steps.items()) if steps else None


def _adaptive_columns(target, ids: list[int], config, drafter, forced: bool, buckets) -> dict:
    """The adaptive program's ``width_costs``, what its policy weighed, with their source
    (:attr:`Run.costs`; :func:`benchlib.width_policies.costs_of`): e.g. ``measured 1.00, 1.27``
    (T = 0: measured in the warm-up) or ``guessed 1.00, 1.40`` (T > 0, block verification: no
    clock may choose), and, if ``forced``, its ``forced_ms``: milliseconds per step forced to
    each width for a whole generation (the second of two runs), e.g. ``2.10, 2.05``: what the
    costs estimate, measured the way a generation spends it."""
    run = Run.of(target, drafter, [ids], config, 0, None, buckets)
    source, costs = width_policies.costs_of(run)
    out = {"width_costs": f"{source} " + ", ".join(f"{c:.2f}" for c in costs)}
    if forced:
        ms = []
        for i in range(len(config.widths)):
            for _ in range(2):  # the first run of a width is slower
                state = jax.block_until_ready(run.start())
                start = time.perf_counter()
                state = jax.block_until_ready(run.decode(state, config.max_new_tokens, force=i))
                seconds = time.perf_counter() - start
                steps = run.take_steps()
            ms.append(f"{1e3 * seconds / max(steps, 1):.2f}")
        out["forced_ms"] = ", ".join(ms)
    return out


def speculative_section(sec: Section, bench: Bench) -> None:
    """Autoregressive against the n-gram drafter and the learned head on SmolLM2, batch 1,
    prompt by prompt; the head's median speedup per temperature is a key figure."""
    sizes = bench.sizes
    sec.columns = GEN_COLUMNS
    target, tok, note = bench.smollm2("float32")
    cfg = target.config
    prompts, prompts_note = held_out(sizes.mtbench, sizes.prompts)
    buckets = (
        DEFAULT if sizes.prompt_bucket is None else ShapeBuckets(prompt=(sizes.prompt_bucket,))
    )
    sec.note(
        f"SmolLM2 fp32: {note}; {prompts_note}; {sizes.new_tokens} new tokens, no stop token; "
        f"speedup = autoregressive time / time, {sizes.gen_repeats} interleaved round(s) per "
        "prompt after a warm-up (the first prompt's alone where one prompt bucket makes every "
        "prompt run the same programs); block efficiency = tokens per target call."
        + (
            f" Every prompt padded to {sizes.prompt_bucket} tokens (one compile per "
            "configuration; prefill scores the padding alike everywhere)."
            if sizes.prompt_bucket
            else ""
        )
    )
    head, why = None, None
    if "head" not in sizes.drafters:
        why = "the learned head is not among this run's drafters"
    elif sizes.quick:
        head = _random_head(target)
        sec.note("Learned head: a randomly initialised head (--quick; the code path only).")
    elif tok is None:
        why = "it needs SmolLM2's real weights (the GGUF is not in $SPECJAX_CACHE)"
    elif not (Path(bench.head_dir) / "params.npz").is_file():
        why = f"no head at {bench.head_dir}"
    else:
        head = sec.item("load head", lambda: load_head(bench.head_dir, target.module))
        if head is not None:
            sec.note(f"Learned head: {bench.head_dir} (FeatureDrafter, L = {sizes.head_len}).")
        else:
            why = "loading it was skipped or failed (see the notes and errors)"
    if why:
        sec.note(f"Learned head skipped: {why}.")
    ngram = dict(max_ngram=3, min_ngram=1)  # configs/smollm2.py (via shakespeare.py)
    sec.note(
        f"n-gram drafter: L = {sizes.ngram_len}, n = 3..1 (configs/smollm2.py). T = 0: greedy "
        "verifier; T = 1: block verifier. Each drafter drafts L tokens every step"
        + (
            ", and, as the CLI does by default (widths=auto), L or none per step "
            "(`adaptive (0, L)`). Width costs: the cost of a step at each width in width-0 "
            "steps that the policy weighed, and where it came from: measured once per program "
            "in the warm-up, before the timed rounds (T = 0), or guessed (T > 0 with block "
            "verification, where no clock may choose); ms per step forced to each width: the "
            "same program forced to each width for a whole generation (what measured costs "
            "estimate)."
            if sizes.adaptive
            else "."
        )
    )
    new = sizes.new_tokens
    configs = {}  # temperature -> method -> (config, drafter)
    for temp in sizes.temperatures:
        params = SamplingParams(temperature=temp)
        spec = DecodeConfig("greedy" if temp == 0 else "block", params, new)
        configs[temp] = {"autoregressive": (DecodeConfig("autoregressive", params, new), None)}
        drafters = {}
        if "ngram" in sizes.drafters:
            drafters["n-gram"] = NgramDrafter(cfg.vocab_size, draft_len=sizes.ngram_len, **ngram)
        if head is not None:
            drafters["head"] = FeatureDrafter(
                head, num_paths=1, draft_len=sizes.head_len, sampling=params
            )
        for name, drafter in drafters.items():
            l_len = drafter.draft_len
            configs[temp][f"{name} L={l_len}"] = (spec, drafter)
            if sizes.adaptive:
                adaptive = dataclasses.replace(spec, widths=(0, l_len))
                configs[temp][f"{name} adaptive (0, {l_len})"] = (adaptive, drafter)
    if all(len(methods) == 1 for methods in configs.values()):
        sec.note("No drafter to measure: the prompts are not run (autoregressive alone).")
        prompts = {}
    for i, (prompt, text) in enumerate(prompts.items()):  # a spent budget drops prompts, not a T
        ids = encode_chat(tok, text, cfg.vocab_size)
        # One prompt bucket: every prompt runs the first prompt's programs (a generation times
        # compiled programs alone, and runs a new program once before timing), so only the
        # first prompt warms up.
        warm = i == 0 or sizes.prompt_bucket is None
        for temp in sizes.temperatures:
            runs = {
                name: functools.partial(generate, target, [ids], c, d, seed=0, buckets=buckets)
                for name, (c, d) in configs[temp].items()
            }
            adaptive = {name: cd for name, cd in configs[temp].items() if cd[0].widths}
            # Forcing each width costs 2 runs per width: --quick forces one program (the code
            # path).
            forced = list(adaptive)
            if sizes.quick:
                forced = forced[: 1 if temp == sizes.temperatures[0] else 0]

            def measure(runs=runs, ids=ids, adaptive=adaptive, forced=forced, warm=warm):
                timed = _timed_generations(runs, sizes.gen_repeats, warm)
                columns = {
                    name: _adaptive_columns(target, ids, *cd, name in forced, buckets)
                    for name, cd in adaptive.items()
                }
                return timed, columns

            measured = sec.item(f"T={temp:g} {prompt}", measure)
            if measured is not None:
                _gen_rows(sec, temp, prompt, measured[0], new, measured[1])
    _head_figures(sec, sizes.temperatures, f"head L={sizes.head_len}", why)


def _head_figures(sec: Section, temperatures, method: str, why: str | None) -> None:
    """``head_speedup_t0_median`` and ``_t1_median``: the head's median speedup over the
    prompts measured at T = 0 and 1 (null, with the reason, where it was not measured)."""
    for temp, key in ((0.0, "head_speedup_t0_median"), (1.0, "head_speedup_t1_median")):
        speedups = [
            r["speedup"]
            for r in sec.data["rows"]
            if r["method"] == method and r["temperature"] == temp
        ]
        if speedups:
            sec.figure(key, statistics.median(speedups))
            sec.note(f"{method} at T = {temp:g}: median speedup over {len(speedups)} prompts.")
        elif temp not in temperatures:
            sec.figure(key, None, f"T = {temp:g} is not among this run's temperatures")
        elif why:
            sec.figure(key, None, f"the learned head was not measured: {why}")
        else:
            reason = "no prompt was measured at this T (the budget was spent, or errors)"
            sec.figure(key, None, reason)


def _random_head(target: PureModel) -> EagleHead:
    c = target.config
    draft_vocab = min(64, c.vocab_size)
    head_cfg = EagleConfig.for_target(c, tuple(range(min(2, c.num_layers))), draft_vocab)
    d2t = np.sort(np.random.default_rng(0).permutation(c.vocab_size)[:draft_vocab])
    embed = target.module.embed[...]
    create = lambda e: EagleHead.create(head_cfg, e, d2t, seed=0, head_rows=e[d2t] * 4.0)
    return nnx.jit(create)(embed)  # one program, not one per eager op


def ssd_section(sec: Section, bench: Bench) -> None:
    """SSD with the draft on the host CPU against plain speculation on the accelerator."""
    sizes = bench.sizes
    sec.columns = [*GEN_COLUMNS, Column("ssd_hit_rate", "SSD hit rate", ".2f")]
    target, tok, note = bench.smollm2("float32")
    cfg = target.config
    devices = ssd_devices("cpu")
    where = f"target on {devices[0].device_kind}, draft on {devices[1].device_kind}"
    if devices[0] == devices[1]:
        where = f"everything on {devices[0].platform} (one device: no overlap)"
    draft = truncated(target.module, sizes.draft_layers)
    l_len, c_budget = sizes.ssd_len, sizes.ssd_budget
    fan = parse_fan_out("geometric", l_len, c_budget, 0.8)
    sec.note(
        f"SmolLM2 fp32 ({note}) with its first {sizes.draft_layers} layers as the draft; "
        f"L = {l_len}; SSD fan-out {fan} (C = {c_budget}, geometric, jit backup); "
        f"{sizes.ssd_new_tokens} new tokens, median of {sizes.ssd_repeats} after a warm-up. Rows: "
        "autoregressive; plain speculation (ModelDrafter, draft on the accelerator); SSD fused "
        "(one program on the accelerator, no overlap); SSD split "
        f"({where}, rounds dispatched from the host)."
    )
    new = sizes.ssd_new_tokens
    for prompt in sizes.ssd_prompts:
        ids = [encode_chat(tok, CHATS[prompt], cfg.vocab_size)]
        for temp in sizes.ssd_temperatures:
            params = SamplingParams(temperature=temp)
            ar = DecodeConfig("autoregressive", params, new)
            spec = DecodeConfig("greedy" if temp == 0 else "block", params, new)
            plain = ModelDrafter(draft, draft_len=l_len, sampling=params)
            ssd = SSDDrafter(draft, ssd=SSDConfig(fan_out=fan), sampling=params)
            runs = {
                "autoregressive": functools.partial(generate, target, ids, ar),
                "plain speculation": functools.partial(generate, target, ids, spec, plain),
                "SSD fused": functools.partial(generate_ssd, target, ids, spec, ssd),
                "SSD split (draft on CPU)": functools.partial(
                    generate_ssd, target, ids, spec, ssd, devices=devices
                ),
            }
            timed = sec.item(
                f"T={temp:g} {prompt}",
                lambda runs=runs: _timed_generations(runs, sizes.ssd_repeats),
            )
            if timed is not None:
                _gen_rows(sec, temp, prompt, timed, new)
