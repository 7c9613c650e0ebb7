"""Sections on the decode step measured right: SmolLM2's step as N steps inside one program
under each model and compiler-option variant (``step``), the Llama-3-8B shape's against the
HBM floor at the in-program copy ceiling (``llama8b``), and the operations per layer of the
SmolLM2-shape step read from the compiled program (``ops``, compiling only: runs on a CPU)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import numpy as np

from benchlib.accelerator import hlo_ops, trace, variants
from benchlib.accelerator.kernels import prefill_scratch, step_bytes
from benchlib.accelerator.loops import DecodeLoop
from benchlib.accelerator.report import Column, Section
from benchlib.accelerator.shared import (
    Bench,
    device_free_bytes,
    load_smollm2,
    random_model,
    tiny_llama8b,
    tiny_smollm2,
)
from benchlib.accelerator.sizes import FULL, GIB
from specjax.models import ModelConfig, config

OP_COLUMNS = [Column(c, c) for c in hlo_ops.COLUMNS]


def _compiled_row(loop: DecodeLoop, options: dict, dump=None) -> tuple[Any, dict]:
    """``(compiled, row)``: the loop compiled with ``options`` (its compile seconds, the
    operations of its step) and its milliseconds per step; ``dump(text)`` receives the
    compiled HLO text."""
    start = time.perf_counter()
    compiled = loop.compile(options)
    row: dict[str, Any] = dict(compile_s=time.perf_counter() - start)
    text = compiled.as_text()
    if dump is not None:
        dump(text)
    ops = hlo_ops.step_ops(text)
    layers = loop.model.config.num_layers
    row |= dict(ops=ops["total"], ops_per_layer=ops["total"] / layers, in_loops=ops["in_loops"])
    row |= {k: ops[k] for k in hlo_ops.COLUMNS}
    row |= loop.ms_per_step(compiled)
    return compiled, row


STEP_COLUMNS = [
    Column("variant", "model variant"),
    Column("options", "compiler options"),
    Column("batch", "B"),
    Column("ms", "ms / step", ".3f"),
    Column("ms_min", "min", ".3f"),
    Column("ms_max", "max", ".3f"),
    Column("ops", "ops / step"),
    Column("ops_per_layer", "ops / layer", ".1f"),
    Column("while", "while"),
    Column("conditional", "cond."),
    Column("in_loops", "ops in nested loops"),
    Column("kernels", "profiled kernels / step", ".1f"),
    Column("kernel_ms", "Σ kernel ms / step", ".3f"),
    Column("compile_s", "compile s", ".1f"),
]


def step_section(sec: Section, bench: Bench) -> None:
    """SmolLM2 bf16 at B = 1: the decode step as N steps inside one program, per variant."""
    sizes = bench.sizes
    sec.columns = STEP_COLUMNS
    platform = jax.devices()[0].platform
    options, skipped = variants.options_for(platform, variants.STEP_OPTIONS)
    loaded = sec.item("SmolLM2 bf16: load", lambda: load_smollm2(sizes, bench.gguf, "bfloat16"))
    if loaded is None:
        return
    model, _, weights = loaded
    n = sizes.step_steps
    sec.note(
        f"SmolLM2-135M bf16 ({weights}), B = 1, context {sizes.context}, S = {sizes.capacity}: "
        f"specjax's decode program (autoregressive, greedy, no stop token) run for {n} steps "
        f"per call, ms / step the median of {sizes.loop_repeats} calls after "
        f"{sizes.loop_warmup} (min and max beside it), each from a fresh prefill. ops: what the "
        "compiled program's step (its while body) launches (`hlo_ops.count_ops`); ops / layer "
        "= ops / step / layers."
    )
    if skipped:
        sec.note(skipped)
    loop = sec.item("prefill and lower", lambda: DecodeLoop(model, 1, sizes, n))
    if loop is None:
        return
    dump = lambda text: bench.dump_hlo("smollm2_step_b1", text)
    first = sec.item("default / default", lambda: _compiled_row(loop, {}, dump))
    if first is not None:
        row = first[1]
        sec.row(variant="default", options="default", batch=1, **row)
        sec.figure("smollm2_step_ms_b1", row["ms"])
        sec.figure("smollm2_ops_per_step_b1", int(row["ops"]))
    per_call = sec.item("one step per host call", loop.per_call_ms)
    if per_call is not None:
        sec.row(variant="default", options="(one forward per host call)", batch=1, ms=per_call)
        sec.figure("smollm2_step_per_call_ms_b1", per_call)
    for name, opts in options.items():
        if name == "default":
            continue
        row = sec.item(f"default / {name}", lambda opts=opts: _compiled_row(loop, opts)[1])
        if row is not None:
            sec.row(variant="default", options=f"{name} {_shown(opts)}", batch=1, **row)
    for name, variant in variants.model_variants().items():
        if name == "default":
            continue

        def run(variant=variant):
            changed = DecodeLoop(variant(model), 1, sizes, n, prefill_from=loop)
            return _compiled_row(changed, {})[1]

        row = sec.item(f"{name} / default", run)
        if row is not None:
            sec.row(variant=name, options="default", batch=1, **row)
    forward = sec.item("forward alone in a fori_loop", loop.forward_loop_ms)
    if forward is not None:
        sec.row(variant="default", options="(model forward alone, fori_loop)", batch=1, ms=forward)
    if first is not None:
        steps = sizes.profile_steps
        run = lambda: _profiled(loop, first[0], steps)
        got = sec.item(f"profiler trace of {steps} steps", run)
        if got is not None:
            sec.row(variant="default", options="(profiler trace, op by op)", batch=1, **got)
            if not got.get("gpu_processes"):
                sec.note(f"The profiler trace has no GPU device on {platform}: no kernel count.")
    sec.note(
        "Variants: "
        + "; ".join(f"{k} {_shown(v)}".strip() for k, v in variants.STEP_OPTIONS.items())
        + ". The profiled row counts the kernel events of one traced call of "
        f"{sizes.profile_steps} steps, per step; XLA:GPU runs op by op under the profiler."
    )


def _shown(options: dict) -> str:
    return "(" + ", ".join(f"{k}={v!r}" for k, v in options.items()) + ")" if options else ""


def _profiled(loop: DecodeLoop, compiled, steps: int) -> dict:
    """Kernel events per step of one profiled call of ``compiled`` for ``steps`` steps."""
    state = jax.block_until_ready(loop.state())
    n = jax.device_put(np.int32(steps))
    got = trace.traced(lambda: compiled(loop.model, None, state, n, loop.rows, None))
    return dict(
        kernels=got["kernels"] / steps,
        kernel_ms=got["kernel_ms"] / steps,
        copies=got["copies"] / steps,
        gpu_processes=got["gpu_processes"],
        trace_lines=got["lines"],
    )


LLAMA_COLUMNS = [
    Column("variant", "model variant"),
    Column("options", "compiler options"),
    Column("batch", "B"),
    Column("ms", "ms / step", ".3f"),
    Column("tokens_per_s", "tok/s", ".0f"),
    Column("floor_ms", "floor ms", ".3f"),
    Column("ratio", "step / floor", ".2f"),
    Column("ratio_host", "step / floor at the host-timed copy", ".2f"),
    Column("floor_all_ms", "floor, all S slots, ms", ".3f"),
    Column("ops", "ops / step"),
    Column("ops_per_layer", "ops / layer", ".1f"),
    Column("concatenate", "concatenate"),
    Column("transpose", "transpose"),
    Column("copy", "copy"),
    Column("compile_s", "compile s", ".1f"),
]


def _llama8b_config(bench: Bench) -> ModelConfig:
    sizes = bench.sizes
    return tiny_llama8b() if sizes.quick else config.llama3_8b(max_seq_len=sizes.capacity)


def llama8b_section(sec: Section, bench: Bench) -> None:
    """The Llama-3-8B shape (random bf16 weights made on the device) at each batch: the
    in-loop step against the floor; then per model variant, then per compiler option."""
    sizes = bench.sizes
    sec.columns = LLAMA_COLUMNS
    cfg = _llama8b_config(bench)
    ceiling = bench.copy_bandwidth()
    host = bench.bandwidth.get("host_copy")
    n = sizes.llama_steps
    label = "Llama-3-8B shape" + (" (tiny stand-in)" if sizes.quick else "")
    live = sizes.context + (n + 1) / 2  # the mean live length over the timed steps
    sec.note(
        f"{label}, random bf16 weights made on the device; context {sizes.context}, S = "
        f"{sizes.capacity}; specjax's decode program for {n} steps per call (median of "
        f"{sizes.loop_repeats}). floor = (weights read + KV of the mean live length {live:.0f}) "
        f"/ the in-program copy ceiling {ceiling / 1e12:.2f} TB/s; 'all S slots' counts every "
        "slot. concatenate / transpose / copy: occurrences in the compiled program's text "
        "(`hlo_ops.grep_ops`, fusions included)."
    )
    free = device_free_bytes()
    need = cfg.num_params * np.dtype(cfg.weight_dtype).itemsize + 4 * GIB
    if free is not None and need > free:
        sec.note(f"{label} skipped: needs ~{need / GIB:.0f} GiB, {free / GIB:.1f} free")
        for b in (1, 8):
            sec.figure(f"llama8b_step_floor_ratio_b{b}", None, "too little device memory")
        return
    model = sec.item(f"{label}: make the weights", lambda: random_model(cfg))
    if model is None:
        return
    platform = jax.devices()[0].platform
    options, skipped = variants.options_for(platform, variants.LLAMA8B_OPTIONS)
    if skipped:
        sec.note(skipped)

    loops: dict[int, DecodeLoop] = {}  # the default model's loop per batch

    def loop_of(m, b) -> DecodeLoop:
        free = device_free_bytes()
        kv = step_bytes(m, b, sizes.capacity)[1]
        need = kv + prefill_scratch(cfg, b, sizes.context, sizes.capacity)
        if free is not None and need > free:
            raise MemoryError(f"needs ~{need / GIB:.1f} GiB, {free / GIB:.1f} free")
        if m is model:
            if b not in loops:
                loops[b] = DecodeLoop(m, b, sizes, n)
            return loops[b]
        return DecodeLoop(m, b, sizes, n, prefill_from=loops.get(b))

    def measure(m, b, opts, dump=None) -> dict:
        compiled, row = _compiled_row(loop_of(m, b), opts, dump)
        row |= hlo_ops.grep_ops(compiled.as_text())
        weights, kv = step_bytes(m, b, round(live))
        _, kv_all = step_bytes(m, b, sizes.capacity)
        floor = 1e3 * (weights + kv) / ceiling
        row |= dict(
            tokens_per_s=1e3 * b / row["ms"],
            floor_ms=floor,
            ratio=row["ms"] / floor,
            ratio_host=row["ms"] / (1e3 * (weights + kv) / host) if host else None,
            floor_all_ms=1e3 * (weights + kv_all) / ceiling,
            weights_gb=weights / 1e9,
            kv_gb=kv / 1e9,
        )
        return row

    default_ms = {}
    for b in sizes.batches:  # the key figures first
        dump = lambda text, b=b: bench.dump_hlo(f"llama8b_step_b{b}", text)
        row = sec.item(f"B={b} default", lambda b=b, dump=dump: measure(model, b, {}, dump))
        if row is not None:
            sec.row(variant="default", options="default", batch=b, **row)
            default_ms[b] = row["ms"]
            if b in (1, 8):
                sec.figure(f"llama8b_step_floor_ratio_b{b}", row["ratio"])
    for b in (1, 8):
        if b not in sizes.batches:
            reason = f"B = {b} is not among this run's batches {sizes.batches}"
            sec.figure(f"llama8b_step_floor_ratio_b{b}", None, reason)
    model_variants = variants.model_variants()
    for b in (1, 8):
        if "int8 weights" not in model_variants:
            reason = "no specjax.models.quantize_weights in this specjax"
            sec.figure(f"llama8b_int8_tok_s_ratio_b{b}", None, reason)
    for name, variant in model_variants.items():  # then the model variants (int8: a figure)
        if name == "default":
            continue
        changed = sec.item(f"{name}: apply", lambda variant=variant: variant(model))
        if changed is None:
            continue
        for b in sizes.batches:
            row = sec.item(f"B={b} {name}", lambda b=b, m=changed: measure(m, b, {}))
            if row is None:
                continue
            sec.row(variant=name, options="default", batch=b, **row)
            if name == "int8 weights" and b in (1, 8) and b in default_ms:
                sec.figure(f"llama8b_int8_tok_s_ratio_b{b}", default_ms[b] / row["ms"])
        changed = None
    for name, opts in options.items():  # and last the compiler-option A/Bs
        if name == "default":
            continue
        for b in sizes.batches:
            row = sec.item(f"B={b} {name}", lambda b=b, opts=opts: measure(model, b, opts))
            if row is not None:
                sec.row(variant="default", options=f"{name} {_shown(opts)}", batch=b, **row)
    model = loops = None
    jax.clear_caches()


OPS_SIZES = dict(context=FULL.context, capacity=FULL.capacity)
"""The ops section's context and KV capacity: the SmolLM2 step's (S = 2048: four attention
windows), whatever the device (it compiles, it does not run); --quick keeps its own."""


OPS_LAYERS = (2, 3)
"""Layer counts of the ops section's two programs (one layer more is one layer's operations;
from 1 to 2 layers the copies around the layers change too)."""


def _smollm2_layers(layers: int, quick: bool) -> ModelConfig:
    """SmolLM2-135M's shape in bf16 (--quick: its tiny stand-in's) with ``layers`` layers."""
    if quick:
        cfg = tiny_smollm2("bfloat16")
    else:
        cfg = config.smollm2_135m(dtype="bfloat16", param_dtype="bfloat16")
    kinds = cfg.layer_types  # cycled: the stand-in has fewer layers than asked for
    kinds = tuple(kinds[i % len(kinds)] for i in range(layers)) if kinds else ()
    return dataclasses.replace(cfg, num_layers=layers, layer_types=kinds)


def ops_section(sec: Section, bench: Bench) -> None:
    """Operations per layer of the SmolLM2-shape decode step: the compiled step of a 3-layer
    model minus that of a 2-layer one, per model variant (random weights, nothing runs)."""
    quick = bench.sizes.quick
    sizes = bench.sizes if quick else dataclasses.replace(bench.sizes, **OPS_SIZES)
    full = config.smollm2_135m().num_layers
    sec.columns = [
        Column("variant", "model variant"),
        Column("what", "counted"),
        *OP_COLUMNS,
        Column("total", "total"),
        Column("in_loops", "ops in nested loops"),
    ]
    shape = "SmolLM2-135M's shape" + (" (its tiny stand-in)" if quick else "")
    sec.note(
        f"{shape} in bf16 (random weights), B = 1, context {sizes.context}, S = "
        f"{sizes.capacity}; specjax's decode program compiled for {jax.devices()[0].platform} "
        "with the default options, its step (the while body) counted by "
        "`hlo_ops.count_ops`: per layer = the 3-layer program's step - the 2-layer one's (1 to "
        "2 layers also changes the copies around the layers); the rest = the 2-layer step - "
        f"two layers; a {full}-layer step = the rest + {full} layers. 'ops in nested loops' "
        "counts one iteration of each loop inside the step (e.g. a search's while)."
    )
    models = sec.item(
        "random 2- and 3-layer models",
        lambda: {k: random_model(_smollm2_layers(k, quick)) for k in OPS_LAYERS},
    )
    if models is None:
        return
    for name, variant in variants.model_variants().items():

        def count(variant=variant) -> dict[int, dict]:
            out = {}
            for layers, model in models.items():
                loop = DecodeLoop(variant(model), 1, sizes, 1)
                out[layers] = hlo_ops.step_ops(loop.compile().as_text())
            return out

        counted = sec.item(name, count)
        if counted is None:
            continue
        keys = (*hlo_ops.COLUMNS, "total", "in_loops")
        small, large = (counted[n] for n in OPS_LAYERS)
        layer = {k: large[k] - small[k] for k in keys}
        rest = {k: small[k] - OPS_LAYERS[0] * layer[k] for k in keys}
        step = {k: rest[k] + full * layer[k] for k in keys}
        sec.row(variant=name, what="per layer", **layer)
        sec.row(variant=name, what="rest of the step", **rest)
        sec.row(variant=name, what=f"step, {full} layers", **step)
        if name == "default":
            sec.figure("smollm2_ops_per_layer", int(layer["total"]))
