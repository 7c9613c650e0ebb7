"""The decode CLI's batch job: every prompt of ``input`` (or ``prompts_file``) through continuous
batching (:class:`~specjax.decode.batching.ContinuousBatch`), each result appended to ``results``
as soon as its prompt finishes, ``resume`` after an interruption, progress on stderr, a summary
at the end.

A prompt's output depends only on the seed and its id, so a resumed run, or one with another
``batch_size``, gives every prompt the tokens an uninterrupted run would have given it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from specjax.cli import interrupts, processes
from specjax.cli.job_files import ProgressLine, ResultsFile, record, write_outputs
from specjax.cli.job_input import Item, input_key, read_input
from specjax.decode.batching import ContinuousBatch, Request


def is_batch_job(cfg) -> bool:
    """Whether the prompts go through continuous batching: ``input``, or ``prompts_file``
    (except with SSD or a draft on its own devices, which decode ``prompts_file`` in fixed
    batches)."""
    fixed = cfg.mode == "ssd" or cfg.draft_placement == "submesh"
    return bool(cfg.input) or (bool(cfg.prompts_file) and not fixed)


def run_job(cfg, target, tokenizer, drafter, config, mesh, buckets, out, main: bool) -> dict:
    """Runs the batch job of ``cfg``; prints the summary and metrics; returns the metrics
    record (as ``specjax.cli.decode.run`` does)."""
    key = input_key(cfg)
    items = read_input(cfg[key], tokenizer, cfg.chat, key)
    results = ResultsFile(cfg.results, cfg.resume, write=main) if cfg.results else None
    skip = np.asarray([results is not None and results.finished(i.id) for i in items])
    skip = processes.agree(skip)  # process 0 read the file: every process skips alike
    todo = [(k, item) for k, item in enumerate(items) if not skip[k]]

    engine = ContinuousBatch(
        target,
        drafter,
        config,
        slots=cfg.batch_size,
        seed=cfg.seed,
        mesh=mesh,
        buckets=buckets,
    )
    progress_line = ProgressLine(cfg.progress if main else "off")
    texts: dict[int, str] = {}  # by position in the input
    tokens: dict[int, list[int]] = {}
    failures: list[str] = []  # this run's error completions
    if results is not None and main:
        interrupts.SAVED[:] = [
            lambda: (
                f"\ninterrupted: the {len(texts)} prompts finished in this run are in "
                f"{cfg.results}; run again with resume=True to finish the rest\n"
            )
        ]
    try:
        for k, completion in _completions(engine, todo, progress_line):
            text = tokenizer.decode(completion.token_ids)
            texts[k], tokens[k] = text, completion.token_ids
            if completion.finish_reason == "error":
                failures.append(f"{items[k].id!r}: {completion.error}")
            if results is not None:
                results.append(record(completion, text))
    except KeyboardInterrupt as err:
        err.note = interrupts.saved_line()
        raise
    finally:  # what was appended is flushed and fsynced whatever ends the run
        if results is not None:
            results.close()
    interrupts.SAVED.clear()  # (kept when the run fails: the failure's line may need it)
    progress = engine.progress
    progress_line.close(progress)
    metrics = engine.metrics

    summary = {"verifier": config.verifier, "drafter": cfg.drafter}
    if cfg.compare_autoregressive and config.speculative and todo:
        baseline = ContinuousBatch(
            target,
            None,
            config.autoregressive(),
            slots=cfg.batch_size,
            seed=cfg.seed,
            mesh=mesh,
            buckets=buckets,
        )
        ar = {k: c for k, c in _completions(baseline, todo, None)}
        metrics = metrics.with_speedup(baseline.metrics.seconds)
        summary["autoregressive_tokens_per_second"] = baseline.metrics.tokens_per_second
        if config.sampling.greedy:
            same = all(ar[k].token_ids == tokens[k] for k in tokens)
            summary["greedy_matches_autoregressive"] = same

    for k, item in enumerate(items):  # prompts finished by an earlier run
        if skip[k]:
            done = results.get(item.id)
            texts[k], tokens[k] = done.get("text", ""), done.get("token_ids", [])
    completions = [texts[k] for k in range(len(items))]
    if not cfg.results:
        sep = "\n" if cfg.chat else ""
        for k, item in enumerate(items):
            out.write(f"--- row {k} ---\n{item.text}{sep}{completions[k]}\n")
    skipped = int(np.sum(skip))
    ran = len(todo) - progress.errors
    line = f"batch job: {len(items)} prompts, {ran} decoded, {progress.errors} errors"
    if skipped:
        line += f", {skipped} already in {cfg.results} (resume)"
    if progress.slot_steps:
        line += f"; slot utilisation {progress.utilization:.1%} over {engine.slots} slots"
    out.write(line + "\n")
    out.write(metrics.table() + "\n")
    if "greedy_matches_autoregressive" in summary:
        same = summary["greedy_matches_autoregressive"]
        out.write(f"greedy output == autoregressive output: {'yes' if same else 'NO'}\n")
    summary.update(
        dataclasses.asdict(metrics),
        prompts=len(items),
        errors=progress.errors,
        skipped=skipped,
        slot_utilization=progress.utilization,
        slots=engine.slots,
        tokens=[tokens[k] for k in range(len(items))],
        text=completions,
    )
    write_outputs(cfg, summary, completions, main)
    if todo and len(failures) == len(todo):  # nothing decoded: the run failed
        kept = f"; their error records are in {cfg.results}" if cfg.results else ""
        raise ValueError(
            f"every prompt of the batch job failed ({len(failures)}; the first, "
            f"{failures[0]}){kept}; fix the cause and run again"
            + (" with resume=True (prompts with an error record run again)" if kept else "")
        )
    return summary


def _completions(engine: ContinuousBatch, todo: list[tuple[int, Item]], on_chunk):
    """``(input position, Completion)`` for every item of ``todo`` (bad items first)."""
    requests = [Request(item.id, item.prompt or [], item.error) for _, item in todo]
    for completion in engine.run(requests, on_chunk):
        yield todo[completion.index][0], completion
