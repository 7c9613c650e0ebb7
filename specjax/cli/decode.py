"""From a config record to text and metrics: what ``python -m specjax.decode`` runs.

Builds the target, the drafter and the :class:`~specjax.decode.DecodeConfig` from an
``ml_collections`` config (see ``configs/shakespeare.py`` for every key), decodes the prompts in
batches, prints the text and a metrics table, and writes ``metrics_json`` / ``output`` atomically
(a temporary file renamed into place only after the whole run, so Ctrl-C never leaves a
half-written file). :func:`main` is the whole command: signals, checks, process set-up, run.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import traceback
from pathlib import Path

from specjax import sharding
from specjax.cli import batch_job, checks, interrupts, peers, processes, validate, width_keys
from specjax.cli.app import ERRORS, error_line
from specjax.cli.job_files import write_outputs
from specjax.decode import compile_cache, generate, submesh
from specjax.decode.config import AUTOREGRESSIVE, DecodeConfig
from specjax.decode.loop import Generation
from specjax.decode.metrics import Metrics
from specjax.decode.ssd import ssd_devices, ssd_rates, ssd_table
from specjax.decode.ssd.drafter import SSDDrafter
from specjax.decode.stream import Stream
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.drafters.feature import FeatureDrafter
from specjax.models.eagle import Frozen
from specjax.models.eagle_formats import load_head
from specjax.models.pure import PureModel, truncated
from specjax.models.sources import load_model
from specjax.sampling import SamplingParams


def main(cfg) -> None:
    """Runs the decode command on a loaded config; errors end the process with one line."""
    interrupts.handle_signals()
    interrupts.SAVED.clear()  # (nothing kept yet by this run)
    try:
        validate.check_decode(cfg)  # before waiting for peer processes
        processes.initialize(
            cfg.coordinator_address,
            cfg.num_processes,
            cfg.process_id,
            cfg.num_cpu_devices,
            cfg.init_timeout,
        )
        run_checked(cfg)
    except KeyboardInterrupt as err:
        _stop(getattr(err, "signum", signal.SIGINT), getattr(err, "note", ""))
    except BaseException as err:
        if interrupts.received() is not None:  # the interrupt came back as another error
            _stop(interrupts.received(), "")
        if isinstance(err, ERRORS):
            peers.fail(error_line(err), err)  # multi-process: the others stop too
            sys.exit(error_line(err))
        if isinstance(err, Exception):
            peers.fail("".join(traceback.format_exception(err)))
        raise
    if interrupts.received() is not None:  # a library swallowed it and the run went on
        _leave_interrupted(interrupts.received(), interrupts.FINISHED)
    interrupts.outputs_complete()


def _stop(signum: int, note: str) -> None:
    """:func:`_leave_interrupted`; in a multi-process run the other processes are told first
    (they stop too), and a process stopped by another's signal says so."""
    peers.leaving(signum)
    reason = peers.stop_reason()
    note = note or interrupts.saved_line()
    if reason and note:  # e.g. a batch job's line: where the finished prompts are
        note = note.replace("interrupted: ", f"interrupted: {reason}; ", 1)
    elif reason:
        note = f"\ninterrupted: {reason}; no output file was written\n"
    _leave_interrupted(signum, note)


def _leave_interrupted(signum: int, note: str) -> None:
    """Exit 128 + ``signum`` with one line, without interpreter teardown: tearing JAX down
    while its runtime threads are still busy can crash (a segfault after the message), and
    nothing is left to save."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stdout.flush()
    sys.stderr.write(note or interrupts.INTERRUPTED)
    sys.stderr.flush()
    os._exit(128 + signum)


def build_mesh(cfg):
    """``(mesh, draft_mesh)``: the target's mesh of ``cfg.mesh_shape`` (None for one device)
    and, with ``draft_placement="submesh"``, the draft's own mesh on the next devices."""
    axes = tuple(a.strip() for a in cfg.mesh_axes.split(",") if a.strip())
    if cfg.draft_placement == "submesh":
        if not cfg.mesh_shape or not cfg.draft_mesh_shape:
            raise ValueError("draft_placement='submesh' needs mesh_shape and draft_mesh_shape")
        if cfg.drafter != "model":
            raise ValueError("draft_placement='submesh' places a draft model; set drafter=model")
        return submesh.split_devices(cfg.mesh_shape, cfg.draft_mesh_shape, axes)
    if not cfg.mesh_shape:
        return None, None
    return sharding.make_mesh(cfg.mesh_shape, axes), None


def build(cfg, mesh=None, draft_mesh=None):
    """``(target PureModel, tokenizer, drafter or None, DecodeConfig)`` from a config."""
    sampling = SamplingParams(cfg.temperature, cfg.top_k, cfg.top_p)
    verifier = AUTOREGRESSIVE if cfg.drafter == "none" else cfg.verifier
    target_module, tokenizer = load_model(
        cfg.target,
        cfg.dtype,
        mesh,
        role="target",
        fuse_projections=cfg.fuse_projections,
        weight_quant=cfg.weight_quant,  # the quantized model is the target decoded
    )
    if tokenizer is None:
        raise ValueError(
            f"target {cfg.target} has no tokenizer, so prompts cannot be encoded; give a model "
            "saved with its tokenizer"
        )
    stop = tokenizer.stop_ids if cfg.stop_at_eos else ()  # EOS and generation_config's
    stop += tuple(int(t) for t in cfg.stop_tokens if int(t) not in stop)
    vocab = target_module.config.vocab_size
    outside = [t for t in stop if not 0 <= t < vocab]
    if outside:
        raise ValueError(
            f"stop_tokens {outside} are outside the vocabulary [0, {vocab}); they could never "
            "stop a row: give ids the tokenizer produces"
        )
    widths, costs = width_keys.widths(cfg), width_keys.width_costs(cfg)
    config = DecodeConfig(
        verifier, sampling, cfg.max_new_tokens, stop, widths=widths, width_costs=costs
    )
    target = PureModel.of(target_module)
    # The drafter's shape; ``replacement`` (how sibling paths are drawn) configures it too.
    shape = dict(num_paths=cfg.num_paths, draft_len=cfg.num_speculative_tokens)
    if cfg.drafter == "ngram":
        drafter = NgramDrafter(
            target.config.vocab_size,
            **shape,
            max_ngram=cfg.ngram_max,
            min_ngram=cfg.ngram_min,
            replacement=cfg.replacement,
        )
    elif cfg.drafter in ("model", "self"):
        if cfg.drafter == "self":
            checks.draft_layers(cfg.draft_layers, target_module.config.num_layers)
            draft_module = truncated(target_module, cfg.draft_layers)
        else:
            replicated = cfg.draft_placement == "replicated"
            where = mesh if draft_mesh is None else draft_mesh
            draft_module, _ = load_model(
                cfg.draft,
                cfg.dtype,
                where,
                replicated,
                role="draft",
                fuse_projections=cfg.fuse_projections,
            )
        if cfg.mode == "ssd":
            ssd = validate.ssd_config(cfg)
            drafter = SSDDrafter(PureModel.of(draft_module), ssd=ssd, sampling=sampling)
        else:
            drafter = ModelDrafter(
                PureModel.of(draft_module),
                **shape,
                sampling=sampling,
                replacement=cfg.replacement,
            )
    elif cfg.drafter == "eagle":
        head = load_head(cfg.draft, target_module)
        shared = head.embed[...] is target_module.embed[...]  # else the head ships its own
        if mesh is not None:  # the head is small: replicated, reading the target's embedding
            sharding.shard_module(head, mesh, replicated=True)
            if shared:
                head.embed = Frozen(target_module.embed[...])
        drafter = FeatureDrafter(head, **shape, sampling=sampling, top_paths=cfg.top_paths)
    else:
        drafter = None
    return target, tokenizer, drafter, config


def read_prompts(cfg, tokenizer) -> tuple[list[str], list[list[int]]]:
    """Prompt texts and ids of the fixed-batch path (``prompt``, or ``prompts_file`` one per
    line for SSD and a draft on its own devices); no prompt is repeated to fill a batch."""
    if cfg.prompts_file:
        path = Path(cfg.prompts_file)
        if not path.is_file():
            raise FileNotFoundError(f"prompts_file {path} not found")
        texts = [line.replace("\\n", "\n") for line in path.read_text().splitlines() if line]
        if not texts:
            raise ValueError(f"prompts_file {path} has no prompts (one per line)")
    else:
        texts = [cfg.prompt]
    if cfg.batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {cfg.batch_size}")
    if cfg.chat:
        if tokenizer.chat_template is None:
            raise ValueError("chat=True but the tokenizer has no chat template; set chat=False")
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": t}]) for t in texts]
    ids = [tokenizer.encode(t, add_special_tokens=not cfg.chat) for t in texts]  # see encode_chat
    return texts, ids


def _stream(target, batch, config, drafter, seed, tokenizer, out, buckets) -> Generation:
    """Streams row 0's text to ``out`` as it is accepted."""
    stream = Stream(target, batch, config, drafter, seed, buckets)
    ids, shown = [], ""
    for new in stream:
        ids.extend(new[0])
        text = tokenizer.decode(ids)
        if text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for the rest
            continue
        out.write(text[len(shown) :])
        out.flush()
        shown = text
    out.write("\n")
    return stream.result


class _Silent:
    """Where processes other than 0 print to."""

    def write(self, s):
        pass

    def flush(self):
        pass


def run(cfg, out=sys.stdout) -> dict:
    """Decodes the config's prompts; prints text and metrics; returns the metrics record.

    With ``mesh_shape`` the models are placed on a device mesh; in a multi-process run (see
    :func:`specjax.cli.processes.initialize`) every process runs this, and only process 0
    prints and writes files.
    """
    validate.check_decode(cfg)  # every key, before any model is loaded
    return run_checked(cfg, out)


def run_checked(cfg, out=sys.stdout) -> dict:
    """:func:`run` for a config :func:`~specjax.cli.validate.check_decode` has passed."""
    buckets = validate.shape_buckets(cfg)
    compile_cache.configure(cfg.compilation_cache)
    mesh, draft_mesh = build_mesh(cfg)
    main = processes.is_main_process()
    out = out if main else _Silent()
    target, tokenizer, drafter, config = build(cfg, mesh, draft_mesh)
    devices = ssd_devices(cfg.ssd_draft_device) if cfg.mode == "ssd" else None
    place = dict(mesh=mesh, buckets=buckets, draft_mesh=draft_mesh, ssd_devices=devices)
    if batch_job.is_batch_job(cfg):
        return batch_job.run_job(cfg, target, tokenizer, drafter, config, mesh, buckets, out, main)
    texts, prompts = read_prompts(cfg, tokenizer)
    batches = [prompts[i : i + cfg.batch_size] for i in range(0, len(prompts), cfg.batch_size)]
    runs: list[Generation] = []
    for i, batch in enumerate(batches):
        if cfg.stream:
            runs.append(
                _stream(target, batch, config, drafter, cfg.seed + i, tokenizer, out, buckets)
            )
        else:
            runs.append(generate(target, batch, config, drafter, cfg.seed + i, **place))
    tokens = [row for g in runs for row in g.tokens]
    metrics = Metrics.combine([g.metrics for g in runs])
    record = {"verifier": config.verifier, "drafter": cfg.drafter}
    if cfg.compare_autoregressive and config.speculative:
        ar_config = config.autoregressive()
        ar = [
            generate(target, b, ar_config, None, cfg.seed + i, mesh, buckets)
            for i, b in enumerate(batches)
        ]
        ar_metrics = Metrics.combine([g.metrics for g in ar])
        metrics = metrics.with_speedup(ar_metrics.seconds)
        record["autoregressive_tokens_per_second"] = ar_metrics.tokens_per_second
        if config.sampling.greedy:
            record["greedy_matches_autoregressive"] = tokens == [r for g in ar for r in g.tokens]
    completions = [tokenizer.decode(row) for row in tokens]
    if not cfg.stream:
        for i, (prompt, completion) in enumerate(zip(texts, completions, strict=True)):
            sep = "\n" if cfg.chat else ""
            out.write(f"--- row {i} ---\n{prompt}{sep}{completion}\n")
    out.write(metrics.table() + "\n")
    if cfg.mode == "ssd":
        ssd = ssd_rates([g.ssd for g in runs])
        record.update(ssd)
        out.write(ssd_table(ssd) + "\n")
    if "greedy_matches_autoregressive" in record:
        same = record["greedy_matches_autoregressive"]
        out.write(f"greedy output == autoregressive output: {'yes' if same else 'NO'}\n")
    record.update(dataclasses.asdict(metrics), tokens=tokens, text=completions)
    write_outputs(cfg, record, completions, main)
    return record
