"""Sections on kernels: versions, copy bandwidth, the decode step against the HBM floor, the
verifiers against a read-once of their inputs."""

from __future__ import annotations

import datetime
import platform
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import benchlib
import specjax
from benchlib.accelerator.report import Column, Section
from benchlib.accelerator.shared import (
    Bench,
    device_free_bytes,
    load_smollm2,
    median_ms,
    random_model,
    tiny_llama8b,
    tree_bytes,
)
from benchlib.accelerator.sizes import GIB, Sizes
from benchlib.verify_inputs import (
    CHAIN,
    MULTIPATH,
    chain_of,
    read_once,
    timing_inputs,
    verifier_call,
)
from specjax.models import (
    KVCache,
    ModelConfig,
    attention_windows,
    config,
)
from specjax.models.pure import PureModel

# ----------------------------------------------------------------------------- sections


def versions_section(sec: Section, bench: Bench) -> None:
    """Versions of the software and the device."""
    import flax
    import jaxlib

    sec.columns = [Column("what", "what"), Column("value", "value")]
    dev = jax.devices()[0]
    rows = {
        "date (UTC)": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M}",
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "flax": flax.__version__,
        "numpy": np.__version__,
        "platform": dev.platform,
        "device kind": dev.device_kind,
        "devices": str(len(jax.devices())),
        "host CPU": benchlib.cpu_name(),
        "OS": platform.platform(),
        "SmolLM2 weights": (
            "not used (--quick)"
            if bench.sizes.quick
            else bench.gguf.name
            if bench.gguf
            else "GGUF not cached: random weights of its shape"
        ),
    }
    try:
        rows["backend platform version"] = str(dev.client.platform_version)
    except Exception:
        pass
    free = device_free_bytes()
    if free is not None:
        rows["device memory free to JAX at start"] = f"{free / GIB:.1f} GiB"
    if shutil.which("nvidia-smi"):
        query = [
            "nvidia-smi",
            "--query-gpu=name,driver_version,memory.total",
            "--format=csv,noheader",
        ]
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=False)
        rows["nvidia-smi"] = (out.stdout.strip() or out.stderr.strip()).replace("\n", "; ")
    source = Path(specjax.__file__).parent
    rows["specjax sources sha256"] = benchlib.source_digest(source, recursive=True)
    for what, value in rows.items():
        sec.data["rows"].append({"what": what, "value": value})
    sec.report.save()


def bandwidth_section(sec: Section, bench: Bench) -> None:
    """The copy ceiling inside one program, beside copies and a read timed per host call."""
    sec.columns = [
        Column("what", "operation"),
        Column("mib", "array MiB", ".0f"),
        Column("ms", "ms", ".3f"),
        Column("gb_s", "GB/s", ".0f"),
        Column("loop_kept", "loop kept"),
    ]
    sec.item("bandwidth", bench.copy_bandwidth)
    bw = bench.bandwidth
    if not bw:
        return
    for row in bw["rows"]:
        sec.row(**row)
    sizes = bench.sizes
    sec.note(
        "GB/s counts bytes read + written. In one program: one jitted `fori_loop` of "
        f"{sizes.ceiling_passes} passes `x = x * c + i` (i the pass index, so that no two "
        f"passes merge) over {sizes.ceiling_bytes / (1 << 20):.0f} MiB of bf16, one call timed "
        "(median); 'loop kept': the compiled program still loops (the passes were not fused "
        "into one). Per host call: one jitted call per sample (the ceiling before). Every floor "
        f"divides by the ceiling ({bw['copy_op']}, {bw['copy'] / 1e9:.0f} GB/s)."
    )
    if bw["in_program"]:
        sec.figure("copy_tb_s", bw["copy"] / 1e12)
    else:
        error = bw["in_program_error"]
        sec.note(f"The in-program ceiling failed ({error}): floors use the host-timed copy.")
        sec.figure("copy_tb_s", None, f"the in-program copy failed: {error}")
    sec.figure("copy_host_tb_s", bw["host_copy"] / 1e12)


def decode_models(bench: Bench) -> list[tuple[str, ModelConfig | None, Callable[[], tuple]]]:
    """(label, config whose memory to check or None, () -> (model, weights note)) for the
    decode-step section."""
    sizes = bench.sizes

    def smollm2(dtype):
        # fp32 stays loaded for the speculative and SSD sections; bf16 is dropped after use.
        if dtype == "float32":
            model, _, note = bench.smollm2(dtype)
        else:
            model, _, note = load_smollm2(sizes, bench.gguf, dtype)
        return model, note

    big = tiny_llama8b() if sizes.quick else config.llama3_8b(max_seq_len=sizes.capacity)
    label = "Llama-3-8B shape bf16" + (" (tiny stand-in)" if sizes.quick else "")
    models = {
        "smollm2_fp32": ("SmolLM2-135M fp32", None, lambda: smollm2("float32")),
        "smollm2_bf16": ("SmolLM2-135M bf16", None, lambda: smollm2("bfloat16")),
        "llama8b": (label, big, lambda: (random_model(big), "random weights made on the device")),
    }
    return [models[name] for name in sizes.decode_models]


def step_bytes(model: PureModel, batch: int, slots: int) -> tuple[int, int]:
    """(weight bytes a decode step reads, KV bytes of ``slots`` entries of every row): all
    weights but an untied embedding, of which only B rows are read."""
    cfg = model.config
    weights = tree_bytes(model.state)
    if not cfg.tie_embeddings:
        weights -= model.module.embed[...].nbytes
    itemsize = np.dtype(cfg.compute_dtype).itemsize
    kv = 2 * cfg.num_layers * batch * slots * cfg.num_kv_heads * cfg.head_dim * itemsize
    return weights, kv


def decode_section(sec: Section, bench: Bench) -> None:
    """One new token after a prefilled context, against the HBM floor."""
    sizes = bench.sizes
    sec.columns = [
        Column("model", "model"),
        Column("batch", "B"),
        Column("ms", "step ms", ".3f"),
        Column("floor_ms", "floor ms", ".3f"),
        Column("ratio", "step / floor", ".2f"),
        Column("floor_all_ms", "floor, all S slots, ms", ".3f"),
        Column("weights_gb", "weights GB", ".3f"),
        Column("kv_gb", "KV GB (context)", ".3f"),
        Column("first_ms", "first call (compile) ms", ".0f"),
    ]
    bw = bench.copy_bandwidth()
    ctx, cap = sizes.context, sizes.capacity
    window = next((w for w in attention_windows.windows(cap) if w > ctx), cap)  # ctx + 1 slots live
    sec.note(
        f"Context {ctx} tokens, KV capacity S = {cap}; floor = (weights read + KV of the "
        f"context) / copy bandwidth {bw / 1e9:.0f} GB/s. The step attends over the live window "
        "(`specjax.models.attention`): the first W slots, W the live length rounded up to a "
        f"power of two (at least {attention_windows.MIN_WINDOW}, at most S; here W = {window}); "
        "the 'all S slots' floor counts every slot, what a step read before the windows."
    )
    for label, cfg, make in decode_models(bench):
        free = device_free_bytes()
        if cfg is not None and free is not None:
            need = cfg.num_params * np.dtype(cfg.weight_dtype).itemsize + 4 * GIB
            if need > free:
                sec.note(f"{label} skipped: needs ~{need / GIB:.0f} GiB, {free / GIB:.1f} free")
                continue
        loaded = sec.item(f"{label}: load", make)
        if loaded is None:
            continue
        model, note = loaded
        sec.note(f"{label}: {note}.")
        for b in sizes.batches:
            need = step_bytes(model, b, cap)[1] + prefill_scratch(model.config, b, ctx, cap)
            free = device_free_bytes()
            if free is not None and need > free:
                sec.note(
                    f"{label} B={b} skipped: needs ~{need / GIB:.1f} GiB, {free / GIB:.1f} free"
                )
                continue
            run = lambda b=b, model=model: _decode_row(model, b, sizes, bw)
            row = sec.item(f"{label} B={b}", run)
            if row is not None:
                sec.row(model=label, batch=b, **row)
        model = loaded = None  # frees the device memory before the next model
        jax.clear_caches()


def prefill_scratch(cfg: ModelConfig, batch: int, context: int, capacity: int) -> int:
    """A generous bound on the prefill's temporaries: fp32 scores and probs of one layer."""
    return 3 * 4 * batch * cfg.num_heads * context * capacity + 2 * GIB


def _decode_row(model: PureModel, batch: int, sizes: Sizes, bw: float) -> dict:
    """The decode step's times and floors at batch ``batch`` after a prefilled context."""
    cfg = model.config
    ctx = sizes.context
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, ctx + 1)), jnp.int32)
    cache = KVCache.init(cfg, batch, sizes.capacity)
    zero, at_ctx = jnp.zeros((batch,), jnp.int32), jnp.full((batch,), ctx, jnp.int32)
    _, cache = benchlib.forward_after(model, cache, zero, tokens[:, :ctx], last_only=True)
    box = [cache]  # the cache is donated to each step and replaced by the one it returns

    def step():
        logits, box[0] = benchlib.forward_after(
            model, box[0], at_ctx, tokens[:, ctx:], last_only=True
        )
        return logits, box[0]

    ms, first = median_ms(step, sizes)
    weights, kv = step_bytes(model, batch, ctx)
    _, kv_all = step_bytes(model, batch, sizes.capacity)
    floor = 1e3 * (weights + kv) / bw
    return dict(
        ms=ms,
        floor_ms=floor,
        ratio=ms / floor,
        floor_all_ms=1e3 * (weights + kv_all) / bw,
        weights_gb=weights / 1e9,
        kv_gb=kv / 1e9,
        first_ms=first,
    )


def verify_section(sec: Section, bench: Bench) -> None:
    """Every verifier against the time to read its inputs once."""
    sizes = bench.sizes
    sec.columns = [
        Column("verifier", "verifier"),
        Column("batch", "B"),
        Column("paths", "K"),
        Column("ms", "ms", ".3f"),
        Column("floor_ms", "read-once floor ms", ".3f"),
        Column("ratio", "ms / floor", ".2f"),
        Column("read_once_ms", "read-once measured ms", ".3f"),
        Column("input_mb", "inputs MB", ".1f"),
    ]
    bw = bench.copy_bandwidth()
    v, l_len, k = sizes.verify_vocab, sizes.verify_len, sizes.multi_paths
    sec.note(
        f"V = {v}, L = {l_len}; chains K = 1, multi-path K = {k}. Floor = bytes of the inputs "
        f"(tokens, draft_probs, target_probs) / copy bandwidth {bw / 1e9:.0f} GB/s; "
        "'read-once measured' is one fused sum over V of both probability arrays. "
        "`verify.optimal_acceptance` is a bound (p, q, K), not a verifier: not timed."
    )
    cases = [(n, True, n) for n in CHAIN]  # (verifier, replacement, label)
    cases += [("specinfer", True, "specinfer (i.i.d.)")]
    cases += [("specinfer", False, "specinfer (w/o replacement)")]
    cases += [(n, True, n) for n in MULTIPATH if n != "specinfer"]
    key = jax.random.key(1)
    for b in sizes.verify_batches:
        base = sec.item(
            f"inputs B={b}",
            lambda b=b: timing_inputs(
                jax.random.key(b), batch=b, num_paths=k, length=l_len, vocab=v
            ),
        )
        if base is None:
            continue
        chain = chain_of(base)
        once_ms = {}
        for multi, draft in ((False, chain), (True, base)):
            once = jax.jit(read_once).lower(draft[1], draft[2]).compile()
            once_ms[multi] = median_ms(lambda once=once, d=draft: once(d[1], d[2]), sizes)[0]
        for name, replacement, label in cases:
            multi = name in MULTIPATH
            draft = base if multi else chain

            def one(name=name, replacement=replacement, draft=draft, once=once_ms[multi]):
                fn = jax.jit(verifier_call(name, replacement)).lower(key, *draft).compile()
                ms, _ = median_ms(lambda: fn(key, *draft), sizes)
                nbytes = tree_bytes(tuple(draft))
                floor = 1e3 * nbytes / bw
                return dict(
                    ms=ms, floor_ms=floor, ratio=ms / floor, read_once_ms=once,
                    input_mb=nbytes / 1e6,
                )  # fmt: skip

            row = sec.item(f"{label} B={b}", one)
            if row is not None:
                sec.row(verifier=label, batch=b, paths=k if multi else 1, **row)
        del base, chain
