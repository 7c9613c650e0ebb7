r"""Benchmarks the speculative decoding loop: block efficiency, acceptance, speed and loop overhead.

For each draft/target pair and temperature, every verifier is run over a grid of K (paths) and L
(draft length) with ``specjax.decode``'s compiled generation (prefill + one ``lax.while_loop``),
side by side with the autoregressive baseline on the same prompts and ``max_new_tokens``:

* **pairs** -- ``shakespeare``: the committed byte-level Shakespeare target (3.2M parameters)
  with its distilled 0.43M-parameter draft model (``ModelDrafter``, any verifier, any K);
  ``smollm2``: SmolLM2-135M-Instruct (``specjax.models.fetch_smollm2``, Q4_1 GGUF dequantized to
  fp32) with the n-gram (prompt-lookup) drafter (``NgramDrafter``, one chain: K = 1), prompted
  through its chat template to reproduce an edited code snippet, so that lookups hit.
* **verifiers** -- ``greedy`` (temperature 0 only: it is the argmax rule, not lossless at T > 0),
  ``token``, ``block`` on chains (K = 1); ``specinfer`` (i.i.d. paths), ``spectr``, ``gbv`` on
  K = 1, 2, 3, 4 paths; L = 2, 4, 6. No stop tokens: every row generates exactly
  ``--max_new_tokens``, so speculative and autoregressive runs produce the same number of tokens.
* **timing** -- each generation is run ``--warmup`` times untimed (the first run compiles;
  compile time is reported apart), then timed in rounds *interleaved* with the autoregressive
  baseline's generation, so that both see the same machine load (``--repeats`` rounds at least,
  more until a configuration's rounds take ``--min_time`` seconds); speedup = median baseline
  time / median speculative time.
  Every run is a call of ``specjax.decode.generate`` (jax caches its compiled executable after
  the first call, so later calls only run it) and its time is ``metrics.seconds``: the compiled
  program alone, one executable call per generation.
* **loop overhead** -- for representative configurations (``--overhead``), the time of a whole
  generation against the sum of its model calls, each jitted and timed alone on the same inputs
  (the state after prefill): prefill, then per step the drafter's ``propose``, the target's tree
  forward (T = 1 + K*L tokens with ``specjax.tree`` positions and mask; cache donated and rolled
  back in the call) and the verification (logits -> probabilities -> verifier), times the number
  of loop iterations. Overhead = generate / sum - 1 (goal: < 10%). Also the jitted standalone
  ``step`` times the iterations, which isolates the while loop itself from the per-step
  bookkeeping (commit, cache compaction, drafter commit, counters).

Outputs: Markdown tables (one per pair x temperature, the overhead table and goal checks) printed
and written to ``--output`` with the command, machine and date; PNG plots (block efficiency vs L
per verifier, one panel per temperature x K; accepted-length histograms of a representative
configuration per verifier) into ``--plot_dir`` as ``decode_block_efficiency_<pair>.png`` and
``decode_histogram_<pair>.png`` (needs matplotlib, the ``[train]`` extra; skipped without it).

The full grid (the default: 87 Shakespeare and 35 SmolLM2 configurations, most of the time spent
compiling them) should take about 40 minutes on 2 CPU cores (35-55 depending on other load; not
yet run in full); ``--quick`` is a smoke run (tiny grid, 16 new tokens) of about two minutes per
pair. Run from the repository root:

  python scripts/bench_decode.py --output=/tmp/bench_decode.md --plot_dir=benchmarks
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import benchlib  # scripts/benchlib.py (scripts run with scripts/ on sys.path)
import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging

import specjax
from specjax import sampling, tree
from specjax.decode import (
    AUTOREGRESSIVE,
    PROGRAMS,
    DecodeConfig,
    Generation,
    compile_generation,
    generate,
    prefill_program,
    prepare,
    step,
)
from specjax.decode.metrics import Metrics
from specjax.decode.step import cut_at_stop, split_keys, verify_rows
from specjax.drafters import ModelDrafter, NgramDrafter
from specjax.models import load_model
from specjax.models.fetch import FILENAME
from specjax.models.pure import PureModel
from specjax.sampling import SamplingParams

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAIN = ("greedy", "token", "block")
MULTIPATH = ("specinfer", "spectr", "gbv")
ALL_VERIFIERS = CHAIN + MULTIPATH
OVERHEAD_GOAL = 0.10

_PAIRS = flags.DEFINE_list("pairs", ["shakespeare", "smollm2"], "Pairs: shakespeare, smollm2.")
_TEMPERATURES = flags.DEFINE_list("temperatures", ["0", "1"], "Sampling temperatures.")
_VERIFIERS = flags.DEFINE_list("verifiers", list(ALL_VERIFIERS), "Verifiers to run.")
_PATHS = flags.DEFINE_list(
    "paths", ["1", "2", "3", "4"], "K values (multi-path verifiers; chains and n-gram use K = 1)."
)
_LENGTHS = flags.DEFINE_list("lengths", ["2", "4", "6"], "Draft lengths L.")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 128, "Tokens generated per row.")
_BATCH = flags.DEFINE_integer("batch", 1, "Rows decoded together (the pair's prompts, cycled).")
_REPEATS = flags.DEFINE_integer(
    "repeats", 1, "Timed runs of each generation at least (median), interleaved with the baseline."
)
_MIN_TIME = flags.DEFINE_float(
    "min_time",
    2.0,
    "More timed rounds (up to --max_repeats) until the rounds of a configuration (its runs and "
    "the baseline's) take about this many seconds: short generations are timed several times.",
)
_MAX_REPEATS = flags.DEFINE_integer("max_repeats", 20, "Timed rounds per configuration at most.")
_WARMUP = flags.DEFINE_integer(
    "warmup", 1, "Untimed runs of each generation first, the first one compiling (at least 1)."
)
_SEED = flags.DEFINE_integer("seed", 0, "PRNG seed of every generation.")
_OVERHEAD = flags.DEFINE_enum(
    "overhead",
    "representative",
    ["none", "representative", "all"],
    "Loop-overhead measurement: none; the baseline, block and gbv at the representative K and L "
    "of each pair and temperature; or every configuration.",
)
_OVERHEAD_ROUNDS = flags.DEFINE_integer(
    "overhead_rounds", 3, "Interleaved rounds of the overhead timing (one generation each)."
)
_COMPONENT_REPEATS = flags.DEFINE_integer(
    "component_repeats", 3, "Timed calls of each model call alone per overhead round."
)
_OUTPUT = flags.DEFINE_string("output", "/tmp/bench_decode.md", "Markdown report file.")
_PLOT_DIR = flags.DEFINE_string("plot_dir", "benchmarks", "Directory of the PNG plots.")
_SHAKESPEARE = flags.DEFINE_string(
    "shakespeare", "checkpoints/shakespeare", "Directory with the target/ and draft/ checkpoints."
)
_SMOLLM2 = flags.DEFINE_string(
    "smollm2", "smollm2", "SmolLM2 model: 'smollm2' (fetch_smollm2) or a .gguf / checkpoint path."
)
_QUICK = flags.DEFINE_bool(
    "quick", False, "Smoke run: a tiny grid (flags given explicitly still win)."
)

QUICK = {  # flag -> value under --quick unless the flag is given on the command line
    "temperatures": ["0"],
    "verifiers": ["token", "block", "gbv"],
    "paths": ["1", "2"],
    "lengths": ["2"],
    "max_new_tokens": 16,
    "repeats": 1,
    "min_time": 0.5,
    "overhead_rounds": 1,
    "component_repeats": 2,
}


def log(msg: str) -> None:
    print(f"[bench_decode] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- pairs

SHAKESPEARE_PROMPTS = (
    "ROMEO:\n",
    "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n",
    "KING RICHARD III:\n",
)

CODE_SNIPPETS = (
    '''def moving_average(values, window):
    """Returns the moving averages of values over a sliding window."""
    if window <= 0:
        raise ValueError("window must be positive")
    total = 0.0
    averages = []
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            averages.append(total / window)
    return averages''',
    '''def count_words(lines):
    """Counts how often each word occurs in the given lines."""
    counts = {}
    for line in lines:
        for word in line.lower().split():
            word = word.strip(".,;:!?")
            if not word:
                continue
            counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda item: item[1], reverse=True)''',
)

SMOLLM2_REQUEST = (
    "Rewrite the following Python function exactly as it is, changing only the name of the "
    "function to `{name}`. Output the whole code.\n\n```python\n{code}\n```"
)


@dataclasses.dataclass
class Pair:
    """A target, how to build its drafter, and the prompts."""

    name: str
    description: str
    target: PureModel
    make_drafter: Callable[[SamplingParams, int, int], Any]
    prompts: list[list[int]]
    prompt_note: str
    chain_only: bool  # the drafter proposes one chain (K = 1)


def _checkpoint(path: str) -> str:
    p = pathlib.Path(path)
    return str(p if p.exists() or p.is_absolute() else ROOT / p)


def _params(model: PureModel) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(model.state))


def _cycle(prompts: list[list[int]], batch: int) -> list[list[int]]:
    return [prompts[i % len(prompts)] for i in range(batch)]


def load_pair(name: str, batch: int) -> Pair:
    if name == "shakespeare":
        base = pathlib.Path(_checkpoint(_SHAKESPEARE.value))
        target_module, tokenizer = load_model(str(base / "target"), "")
        draft_module, _ = load_model(str(base / "draft"), "")
        target, draft = PureModel.of(target_module), PureModel.of(draft_module)
        prompts = [tokenizer.encode(t) for t in SHAKESPEARE_PROMPTS]
        used = _cycle(list(SHAKESPEARE_PROMPTS), batch)
        return Pair(
            name=name,
            description=(
                f"target `{target.config.name}` ({_params(target) / 1e6:.2f}M parameters), "
                f"draft model `{draft.config.name}` ({_params(draft) / 1e6:.2f}M), byte-level"
            ),
            target=target,
            make_drafter=lambda sp, k, l: ModelDrafter(draft, sp, k, l, True),
            prompts=_cycle(prompts, batch),
            prompt_note="prompts " + ", ".join(repr(t) for t in used),
            chain_only=False,
        )
    if name == "smollm2":
        module, tokenizer = load_model(_SMOLLM2.value, "")
        target = PureModel.of(module)
        vocab = target.config.vocab_size
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": SMOLLM2_REQUEST.format(name=f"f{i}", code=code)}]
            )
            for i, code in enumerate(CODE_SNIPPETS)
        ]
        prompts = [tokenizer.encode(t) for t in texts]
        used = _cycle(prompts, batch)
        source = FILENAME if _SMOLLM2.value == "smollm2" else pathlib.Path(_SMOLLM2.value).name
        return Pair(
            name=name,
            description=(
                f"target SmolLM2-135M-Instruct (`{source}`, {_params(target) / 1e6:.0f}M "
                "parameters, dequantized to fp32), n-gram drafter (max_ngram 3, min_ngram 1; "
                "one chain)"
            ),
            target=target,
            make_drafter=lambda sp, k, l: NgramDrafter(vocab, l, 3, 1),
            prompts=used,
            prompt_note=(
                "chat-template prompts asking to reproduce a Python function with one rename "
                f"({', '.join(str(len(p)) for p in used)} tokens)"
            ),
            chain_only=True,
        )
    raise app.UsageError(f"unknown pair {name!r}; choose shakespeare or smollm2")


# ----------------------------------------------------------------------------- grid


@dataclasses.dataclass(frozen=True)
class Case:
    verifier: str
    k: int
    l: int

    @property
    def label(self) -> str:
        if self.verifier == AUTOREGRESSIVE:
            return "autoregressive"
        return f"{self.verifier} K={self.k} L={self.l}"


AR_CASE = Case(AUTOREGRESSIVE, 0, 0)


def cases_for(pair: Pair, temperature: float, verifiers, paths, lengths) -> list[Case]:
    out = []
    for v in verifiers:
        if v == "greedy" and temperature > 0:
            continue
        ks = (1,) if v in CHAIN or pair.chain_only else paths
        out += [Case(v, k, l) for k in ks for l in lengths]
    return out


def representative(pair: Pair, verifier: str, paths, lengths) -> Case:
    """The configuration shown in the histogram (and timed for overhead): the middle L; K = 1
    for chains and the n-gram drafter, else K = 2 (or the largest K run)."""
    l = sorted(lengths)[len(lengths) // 2]
    if verifier in CHAIN or pair.chain_only:
        return Case(verifier, 1, l)
    return Case(verifier, 2 if 2 in paths else max(paths), l)


# ----------------------------------------------------------------------------- measurement


@dataclasses.dataclass
class Totals:
    compile_s: float = 0.0
    generations: int = 0


TOTALS = Totals()


def interleaved(calls: dict[str, tuple[Callable[[], float], int]], rounds: int) -> dict:
    """Seconds returned by ``name: (fn, calls per round)``, the names called in turn each round."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, (fn, count) in calls.items():
            samples[name] += [fn() for _ in range(count)]
    return samples


def wall(fn: Callable[[], Any]) -> Callable[[], float]:
    """``fn`` made to return its wall time (results waited for)."""

    def timed() -> float:
        start = time.perf_counter()
        jax.block_until_ready(fn())
        return time.perf_counter() - start

    return timed


class Generator:
    """Repeated :func:`specjax.decode.generate` calls of one configuration.

    The first call compiles (``compile_s``); jax caches the executable, so later calls only run
    it. Each run returns ``metrics.seconds``: the compiled program alone, from the call to the
    final state, as ``generate`` measures it (preparing inputs and reading outputs excluded).
    """

    def __init__(self, target: PureModel, drafter, prompts, config: DecodeConfig, seed: int):
        self.target, self.config, self.seed = target, config, seed
        self.drafter = drafter if config.speculative else None
        self.prompts = prompts
        self.last: Generation = generate(target, prompts, config, self.drafter, seed)
        self.compile_s = self.last.compile_seconds
        TOTALS.compile_s += self.compile_s
        TOTALS.generations += 1

    def run(self) -> float:
        self.last = generate(self.target, self.prompts, self.config, self.drafter, self.seed)
        TOTALS.generations += 1
        return self.last.metrics.seconds

    def hlo_facts(self) -> dict[str, int] | None:
        """Counts in the optimized HLO of the decode program ``generate`` runs (its cached
        executable): ``while`` loops and host-communication ops."""
        _, decode = compile_generation(self.target, self.prompts, self.config, self.drafter)
        text = decode.as_text()
        return {
            "while": text.count(" while("),
            "host": sum(
                text.count(s) for s in ("callback", "infeed(", "outfeed(", " send(", " recv(")
            ),
        }


# Model calls timed alone (loop overhead). Each is one jitted call on the state after prefill.


_init = jax.jit(prefill_program, static_argnames=("capacity", "buffer"))
_step = jax.jit(step, static_argnames=("config",))


@jax.jit
def _propose(drafter, state):
    _, k_draft, _ = split_keys(state.keys, 3)
    return drafter.propose(state.draft_state, k_draft, state.tokens, state.lengths)


@functools.partial(jax.jit, static_argnames=("k", "l"))
def _tree_inputs(state, draft_tokens, k, l):
    b = state.batch
    last = jnp.take_along_axis(state.tokens, (state.lengths - 1)[:, None], axis=1)
    feed = jnp.concatenate([last, jnp.maximum(draft_tokens, 0).reshape(b, k * l)], axis=1)
    positions = (state.lengths - 1)[:, None] + jnp.asarray(tree.tree_depths(k, l))
    t = positions.shape[1]
    mask = jnp.broadcast_to(jnp.asarray(tree.tree_mask(k, l)), (b, t, t))
    return feed, positions, mask


@functools.partial(jax.jit, donate_argnums=(1,))
def _tree_forward(target, cache, lengths, feed, positions, mask):
    cache = cache.rollback(lengths)  # every call sees the same committed context
    return target(feed, cache=cache, positions=positions, attn_mask=mask)


@functools.partial(jax.jit, static_argnames=("config",))
def _verify(config, state, draft, logits):
    _, _, k_verify = split_keys(state.keys, 3)
    num_draft = cut_at_stop(draft, config.stop_tokens)
    probs = sampling.probs_from_logits(logits, config.sampling)
    k, l = draft.tokens.shape[1:]
    target_probs = probs[:, jnp.asarray(tree.node_index(k, l))]
    return verify_rows(config, k_verify, draft, num_draft, target_probs)


@functools.partial(jax.jit, static_argnames=("params",), donate_argnums=(1,))
def _decode(target, cache, lengths, token, keys, params):
    cache = cache.rollback(lengths)
    logits, cache = target(token, cache=cache)
    probs = sampling.probs_from_logits(logits[:, 0], params)
    return jax.vmap(sampling.sample)(keys, probs), cache


@jax.jit
def _noop(target, drafter, state):
    del target, drafter
    return state.lengths + 1


def _copy(tree_):
    return jax.tree.map(jnp.copy, tree_)


def measure_overhead(gen: Generator, steps: int) -> dict:
    """Times one whole generation against its model calls alone (see the module docstring)."""
    target, drafter, config = gen.target, gen.drafter, gen.config
    b = prepare(target, drafter, gen.prompts, config)
    args = (b.prompts, b.lengths, b.active, np.int32(gen.seed))

    def prefill():
        return _init(target, drafter, *args, capacity=b.capacity, buffer=b.buffer)

    state = jax.block_until_ready(prefill())
    base = state.target_cache.lengths
    holder = {"cache": _copy(state.target_cache)}
    calls: dict[str, Callable[[], Any]] = {"prefill": prefill}
    if config.speculative:
        draft, _ = _propose(drafter, state)
        feed, positions, mask = _tree_inputs(
            state, draft.tokens, drafter.num_paths, drafter.draft_len
        )
        logits, holder["cache"] = _tree_forward(
            target, holder["cache"], base, feed, positions, mask
        )

        def forward():
            out, holder["cache"] = _tree_forward(
                target, holder["cache"], base, feed, positions, mask
            )
            return out

        calls["propose"] = lambda: _propose(drafter, state)
        calls["forward"] = forward
        calls["verify"] = lambda: _verify(config, state, draft, logits)
    else:
        _, k_sample = split_keys(state.keys, 2)
        last = jnp.take_along_axis(state.tokens, (state.lengths - 1)[:, None], axis=1)

        def decode():
            out, holder["cache"] = _decode(
                target, holder["cache"], base, last, k_sample, config.sampling
            )
            return out

        calls["decode"] = decode
    calls["step"] = lambda: _step(target, drafter, state, config)
    # One jitted call that takes the same pytrees and does nothing: the cost of a dispatch.
    calls["dispatch"] = lambda: _noop(target, drafter, state)
    for fn in calls.values():  # compile (first call) and warm up
        TOTALS.compile_s += wall(fn)()
        fn()
    reps = _COMPONENT_REPEATS.value
    timed = {"generate": (gen.run, 1)} | {name: (wall(fn), reps) for name, fn in calls.items()}
    samples = interleaved(timed, _OVERHEAD_ROUNDS.value)
    med = {name: statistics.median(t) for name, t in samples.items()}
    per_step = [n for n in ("propose", "forward", "verify", "decode") if n in med]
    model_sum = med["prefill"] + steps * sum(med[n] for n in per_step)
    step_sum = med["prefill"] + steps * med["step"]
    d = med["dispatch"]
    net = lambda name: max(med[name] - d, 0.0)
    net_sum = net("prefill") + steps * sum(net(n) for n in per_step)
    return {
        **med,
        "steps": steps,
        "model_sum": model_sum,
        "net_sum": net_sum,
        "step_sum": step_sum,
        "overhead": med["generate"] / model_sum - 1,
        "net_overhead": med["generate"] / net_sum - 1,
        "loop_overhead": med["generate"] / step_sum - 1,
    }


# ----------------------------------------------------------------------------- results


@dataclasses.dataclass
class Row:
    pair: str
    temperature: float
    case: Case
    metrics: Metrics
    ar_seconds: float
    compile_s: float
    same_as_ar: bool | None
    runs: int

    @property
    def be_se(self) -> float:
        """Standard error of the block efficiency (per-step tau treated as independent)."""
        hist = np.asarray(self.metrics.accepted_length_histogram, np.float64)
        n = hist.sum()
        if n < 2:
            return float("nan")
        tau = np.arange(hist.size)
        mean = (hist * tau).sum() / n
        var = (hist * (tau - mean) ** 2).sum() / (n - 1)
        return float(np.sqrt(var / n))

    @property
    def speedup(self) -> float:
        return self.ar_seconds / self.metrics.seconds


def run_pair(pair: Pair, temperature: float, grid: dict, rows: list, overheads: list) -> dict:
    """Runs every configuration of one pair at one temperature; returns the baseline summary."""
    sp = SamplingParams(temperature=temperature)
    max_new = _MAX_NEW.value
    ar_config = DecodeConfig(AUTOREGRESSIVE, sp, max_new)
    ar_gen = Generator(pair.target, None, pair.prompts, ar_config, _SEED.value)
    warm = [ar_gen.last.metrics.seconds] + [ar_gen.run() for _ in range(_WARMUP.value - 1)]
    ar_estimate = min(warm)
    ar_tokens = ar_gen.last.tokens
    ar_steps = ar_gen.last.metrics.target_forwards
    ar_times: list[float] = []
    cases = cases_for(pair, temperature, grid["verifiers"], grid["paths"], grid["lengths"])
    if _OVERHEAD.value == "all":
        measured = {AR_CASE, *cases}
    elif _OVERHEAD.value == "representative":
        picks = [v for v in ("block", "gbv") if v in grid["verifiers"]] or grid["verifiers"][:1]
        measured = {AR_CASE} | {
            representative(pair, v, grid["paths"], grid["lengths"]) for v in picks
        }
    else:
        measured = set()
    if AR_CASE in measured:
        log(f"{pair.name} T={temperature}: overhead of the autoregressive baseline")
        overheads.append((pair.name, temperature, AR_CASE, measure_overhead(ar_gen, ar_steps)))
    hlo = None
    for i, case in enumerate(cases):
        config = DecodeConfig(case.verifier, sp, max_new)
        drafter = pair.make_drafter(sp, case.k, case.l)
        gen = Generator(pair.target, drafter, pair.prompts, config, _SEED.value)
        if hlo is None:
            hlo = gen.hlo_facts() or {}
        warm = [gen.last.metrics.seconds] + [gen.run() for _ in range(_WARMUP.value - 1)]
        rounds = int(np.ceil(_MIN_TIME.value / (ar_estimate + min(warm))))
        rounds = max(_REPEATS.value, min(rounds, _MAX_REPEATS.value))
        samples = interleaved({"ar": (ar_gen.run, 1), "spec": (gen.run, 1)}, rounds)
        ar_times += samples["ar"]
        seconds = statistics.median(samples["spec"])
        m = gen.last.metrics
        metrics = dataclasses.replace(
            m, seconds=seconds, tokens_per_second=m.generated_tokens / seconds
        )
        same = gen.last.tokens == ar_tokens if sp.greedy else None
        row = Row(
            pair.name,
            temperature,
            case,
            metrics,
            statistics.median(samples["ar"]),
            gen.compile_s,
            same,
            rounds,
        )
        rows.append(row)
        log(
            f"{pair.name} T={temperature} [{i + 1}/{len(cases)}] {case.label}: "
            f"E={metrics.block_efficiency:.2f} acc={metrics.acceptance_rate:.2f} "
            f"{metrics.tokens_per_second:.1f} tok/s, speedup {row.speedup:.2f} "
            f"(compile {gen.compile_s:.1f} s)"
        )
        if case in measured:
            log(f"{pair.name} T={temperature}: overhead of {case.label}")
            overheads.append(
                (pair.name, temperature, case, measure_overhead(gen, metrics.target_forwards))
            )
        del gen
        if (i + 1) % 15 == 0:
            # Every compiled program keeps its LLVM code mapped; a few dozen of them exhaust
            # XLA:CPU's section memory ("Unable to allocate section memory"). Start afresh.
            jax.clear_caches()
            PROGRAMS.clear()  # generate's own compiled programs
    if not ar_times:  # no speculative configuration: time the baseline alone
        ar_times = [ar_gen.run() for _ in range(_REPEATS.value)]
    tokens = sum(len(r) for r in ar_tokens)
    return {
        "tok_s": tokens / statistics.median(ar_times),
        "tok_s_range": (tokens / max(ar_times), tokens / min(ar_times)),
        "runs": len(ar_times),
        "compile_s": ar_gen.compile_s,
        "hlo": hlo if hlo is not None else (ar_gen.hlo_facts() or {}),
    }


# ----------------------------------------------------------------------------- report


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _order(row: Row):
    return (ALL_VERIFIERS.index(row.case.verifier), row.case.k, row.case.l)


def results_table(pair: Pair, temperature: float, rows: list[Row], baseline: dict) -> str:
    greedy = temperature == 0
    header = ["verifier", "K", "L", "block eff.", "± SE", "accept.", "tok/s", "speedup"]
    header += ["steps", "runs", "compile s"] + (["= AR"] if greedy else [])
    body = []
    for r in sorted(rows, key=_order):
        m = r.metrics
        line = [r.case.verifier, r.case.k, r.case.l, f"{m.block_efficiency:.2f}"]
        line += [f"{r.be_se:.2f}", f"{m.acceptance_rate:.2f}", f"{m.tokens_per_second:.1f}"]
        line += [f"{r.speedup:.2f}×", m.target_forwards, r.runs, f"{r.compile_s:.1f}"]
        if greedy:
            line.append("yes" if r.same_as_ar else "**no**")
        body.append(line)
    lo, hi = baseline["tok_s_range"]
    title = (
        f"#### {pair.name}, temperature {temperature:g}\n\n"
        f"{pair.description}; {pair.prompt_note}; batch {len(pair.prompts)}, "
        f"{_MAX_NEW.value} new tokens per row. Autoregressive baseline: "
        f"**{baseline['tok_s']:.1f} tok/s** (median of {baseline['runs']} runs interleaved with "
        f"the rows below; range {lo:.1f}–{hi:.1f}; compile {baseline['compile_s']:.1f} s)."
    )
    if greedy:
        title += (
            " `= AR`: the speculative tokens equal the autoregressive ones (temperature 0 is "
            "deterministic; every verifier must reproduce them)."
        )
    return title + "\n\n" + table(header, body)


def _cmp(a: Row, b: Row) -> tuple[str, str]:
    """(a - b ± SE, verdict) for 'a >= b'."""
    diff = a.metrics.block_efficiency - b.metrics.block_efficiency
    se = float(np.hypot(a.be_se, b.be_se))
    se = 0.0 if np.isnan(se) else se
    if diff >= 0:
        verdict = "met"
    elif diff >= -2 * se:
        verdict = "within 2 SE"
    else:
        verdict = "**not met**"
    return f"{diff:+.2f} ± {se:.2f}", verdict


def goal_checks(rows: list[Row]) -> str:
    index = {(r.pair, r.temperature, r.case): r for r in rows}
    out = []

    def section(title: str, header, lines, empty: str) -> None:
        if not lines:
            out.append(f"**{title}**: {empty}")
            return
        verdicts = [line[-1] for line in lines]
        met = sum(v == "met" for v in verdicts)
        near = sum(v == "within 2 SE" for v in verdicts)
        out.append(
            f"**{title}**: met at {met} of {len(lines)} points, within two standard errors at "
            f"{near} more.\n\n" + table(header, lines)
        )

    lines = []
    for (pair, t, case), r in sorted(
        index.items(), key=lambda kv: (kv[0][0], kv[0][1], _order(kv[1]))
    ):
        if case.verifier == "block":
            tok = index.get((pair, t, Case("token", 1, case.l)))
            if tok:
                diff, verdict = _cmp(r, tok)
                e_b, e_t = r.metrics.block_efficiency, tok.metrics.block_efficiency
                lines.append([pair, f"{t:g}", case.l, f"{e_t:.2f}", f"{e_b:.2f}", diff, verdict])
    section(
        "BV ≥ token (block efficiency, K = 1)",
        ["pair", "T", "L", "token", "block", "block − token", "verdict"],
        lines,
        "not measured (needs token and block).",
    )
    lines = []
    for (pair, t, case), r in sorted(
        index.items(), key=lambda kv: (kv[0][0], kv[0][1], _order(kv[1]))
    ):
        if case.verifier == "gbv" and case.k in (2, 3):
            bv = index.get((pair, t, Case("block", 1, case.l)))
            if bv:
                diff, verdict = _cmp(r, bv)
                e_g, e_b = r.metrics.block_efficiency, bv.metrics.block_efficiency
                lines.append(
                    [pair, f"{t:g}", case.k, case.l, f"{e_b:.2f}", f"{e_g:.2f}", diff, verdict]
                )
    section(
        "GBV (K = 2, 3) ≥ BV (K = 1) at the same L",
        ["pair", "T", "K", "L", "block", "gbv", "gbv − block", "verdict"],
        lines,
        "not measured (needs gbv at K = 2 or 3 and block; the n-gram pair has K = 1 only).",
    )
    fast = [r for r in rows if r.pair == "smollm2" and r.metrics.block_efficiency >= 2]
    lines = [
        [
            f"{r.temperature:g}",
            r.case.label,
            f"{r.metrics.block_efficiency:.2f}",
            f"{r.speedup:.2f}×",
            "met" if r.speedup > 1 else "**not met**",
        ]
        for r in sorted(fast, key=lambda r: (r.temperature, _order(r)))
    ]
    if lines:
        met = sum(line[-1] == "met" for line in lines)
        out.append(
            f"**Speculative faster than autoregressive on SmolLM2 wherever block efficiency ≥ 2**: "
            f"met at {met} of {len(lines)} configurations.\n\n"
            + table(["T", "configuration", "block eff.", "speedup", "verdict"], lines)
        )
    else:
        out.append(
            "**Speculative faster than autoregressive on SmolLM2 wherever block efficiency ≥ 2**: "
            "no SmolLM2 configuration reached block efficiency 2 (or the pair was not run)."
        )
    return "#### Goal checks\n\n" + "\n\n".join(out)


def overhead_table(overheads: list, hlo: dict[str, dict]) -> str:
    header = ["pair", "T", "configuration", "steps", "generate s", "prefill ms"]
    header += ["propose ms", "forward ms", "verify ms", "Σ model calls s", "overhead"]
    header += ["dispatch ms", "overhead w/o dispatch", "step ms", "Σ steps s", "loop overhead"]
    body = []
    ms = lambda d, k: f"{d[k] * 1e3:.2f}" if k in d else "—"
    for pair, t, case, d in overheads:
        forward = ms(d, "forward") if "forward" in d else ms(d, "decode") + " (1 token)"
        body.append(
            [
                pair,
                f"{t:g}",
                case.label,
                d["steps"],
                f"{d['generate']:.3f}",
                ms(d, "prefill"),
                ms(d, "propose"),
                forward,
                ms(d, "verify"),
                f"{d['model_sum']:.3f}",
                f"{d['overhead']:+.1%}",
                ms(d, "dispatch"),
                f"{d['net_overhead']:+.1%}",
                ms(d, "step"),
                f"{d['step_sum']:.3f}",
                f"{d['loop_overhead']:+.1%}",
            ]
        )
    met = sum(d["overhead"] < OVERHEAD_GOAL for *_, d in overheads)
    facts = "; ".join(
        f"{name}: {f['while']} `while` op(s), {f['host']} host-communication ops"
        if f
        else f"{name}: not inspected"
        for name, f in hlo.items()
    )
    return (
        "#### Loop overhead (whole generation vs its model calls timed alone)\n\n"
        "`generate` is ONE call of ONE compiled XLA executable per generation (prefill + "
        "`lax.while_loop`); the host waits once for the final state, with no host round trip per "
        f"step (optimized HLO of the first configuration per pair: {facts}). "
        "Σ model calls = prefill + steps × (propose + tree forward + verify), each a jitted call "
        "timed alone on the state after prefill (median; the forward donates the target cache "
        "and rolls it back, as bench_model does; verify = logits → probabilities → verifier). "
        "Overhead = generate / Σ model calls − 1, i.e. what the loop adds on top of the model "
        "calls: token commit, KV-cache compaction, draft-cache commit, counters and the loop "
        "itself. Each call timed alone also pays one dispatch from Python (`dispatch`: a "
        "jitted call taking the same model, drafter and state pytrees and doing nothing, timed "
        "in the same rounds), which the fused loop does not; `overhead w/o dispatch` subtracts "
        "it from every call, an estimate of the loop's own cost where the model calls are so "
        "cheap (the Shakespeare pair) that dispatch dominates them. "
        "The last columns time the jitted standalone step instead (same state): "
        "loop overhead = generate / (prefill + steps × step) − 1 isolates the `while_loop` from "
        f"the step's own bookkeeping. Goal: overhead < {OVERHEAD_GOAL:.0%} (met at {met} of "
        f"{len(overheads)}). Negative values mean the fused loop is faster than the calls "
        "dispatched one by one.\n\n" + table(header, body)
    )


# ----------------------------------------------------------------------------- plots


def make_plots(pairs: dict[str, Pair], rows: list[Row], grid: dict, plot_dir: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out_dir = pathlib.Path(plot_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    colors = {v: f"C{i}" for i, v in enumerate(ALL_VERIFIERS)}
    for name, pair in pairs.items():
        mine = [r for r in rows if r.pair == name]
        if not mine:
            continue
        temps = sorted({r.temperature for r in mine})
        ks = sorted({r.case.k for r in mine})
        fig, axes = plt.subplots(
            len(temps),
            len(ks),
            figsize=(3.6 * len(ks) + 1.5, 3.0 * len(temps) + 0.6),
            squeeze=False,
            sharey=True,
        )
        for (i, t), (j, k) in itertools.product(enumerate(temps), enumerate(ks)):
            ax = axes[i][j]
            for n, v in enumerate(ALL_VERIFIERS):
                pts = sorted(
                    (r.case.l, r.metrics.block_efficiency, r.be_se)
                    for r in mine
                    if r.temperature == t and r.case.k == k and r.case.verifier == v
                )
                if pts:
                    ls, es, ses = zip(*pts, strict=True)
                    x = np.asarray(ls) + 0.08 * (n - 2.5)  # dodge: equal values stay visible
                    ax.errorbar(x, es, yerr=ses, marker="o", capsize=2, label=v, color=colors[v])
            ax.axhline(1.0, color="gray", ls="--", lw=0.8)
            ax.set_title(f"T = {t:g}, K = {k}")
            ax.set_xlabel("draft length L")
            all_l = sorted({r.case.l for r in mine})
            ax.set_xticks(all_l)
            ax.set_xlim(all_l[0] - 1, all_l[-1] + 1)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("block efficiency (tokens / target call)")
        handles, labels = [], []
        for ax in axes.flat:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, loc="upper right", fontsize="small")
        fig.suptitle(f"Block efficiency per verifier: {name}", fontsize="medium")
        fig.tight_layout(rect=(0, 0, 0.88, 1))
        path = out_dir / f"decode_block_efficiency_{name}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(str(path))

        verifiers = [v for v in ALL_VERIFIERS if any(r.case.verifier == v for r in mine)]
        fig, axes = plt.subplots(
            len(temps),
            len(verifiers),
            figsize=(3.0 * len(verifiers) + 1.0, 2.6 * len(temps) + 0.6),
            squeeze=False,
        )
        for (i, t), (j, v) in itertools.product(enumerate(temps), enumerate(verifiers)):
            ax = axes[i][j]
            case = representative(pair, v, grid["paths"], grid["lengths"])
            row = next((r for r in mine if r.temperature == t and r.case == case), None)
            if row is None:
                ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
                ax.set_title(f"{v}, T = {t:g}")
                ax.set_axis_off()
                continue
            hist = np.asarray(row.metrics.accepted_length_histogram, np.float64)
            ax.bar(np.arange(hist.size), hist / max(hist.sum(), 1), color=colors[v])
            ax.set_title(f"{v} K={case.k} L={case.l}, T = {t:g}", fontsize="small")
            ax.set_xlabel("accepted length τ")
            ax.set_xticks(np.arange(hist.size))
            if j == 0:
                ax.set_ylabel("fraction of steps")
            ax.grid(alpha=0.3, axis="y")
        fig.suptitle(f"Accepted-length histogram: {name}", fontsize="medium")
        fig.tight_layout()
        path = out_dir / f"decode_histogram_{name}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(str(path))
    return written


# ----------------------------------------------------------------------------- main


code_digest = functools.partial(
    benchlib.source_digest, pathlib.Path(specjax.__file__).parent, recursive=True
)
"""Short sha256 of the ``specjax`` sources, to tell which code was measured."""


def _value(name: str):
    flag = flags.FLAGS[name]
    return QUICK[name] if _QUICK.value and name in QUICK and not flag.present else flag.value


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every restore at INFO
    grid = {
        "temperatures": [float(t) for t in _value("temperatures")],
        "verifiers": list(_value("verifiers")),
        "paths": [int(k) for k in _value("paths")],
        "lengths": [int(l) for l in _value("lengths")],
    }
    for name in ("max_new_tokens", "repeats", "min_time", "overhead_rounds", "component_repeats"):
        flags.FLAGS[name].value = _value(name)
    unknown = set(grid["verifiers"]) - set(ALL_VERIFIERS)
    if unknown:
        raise app.UsageError(f"unknown --verifiers {sorted(unknown)}")
    if min(grid["paths"]) < 1 or min(grid["lengths"]) < 1 or _BATCH.value < 1:
        raise app.UsageError("--paths, --lengths and --batch must be >= 1")
    if _WARMUP.value < 1:
        raise app.UsageError("--warmup must be >= 1 (the first run compiles)")
    if _REPEATS.value < 1 or _OVERHEAD_ROUNDS.value < 1 or _COMPONENT_REPEATS.value < 1:
        raise app.UsageError("--repeats, --overhead_rounds and --component_repeats must be >= 1")

    load_start = os.getloadavg()[0]
    digest = code_digest()
    start = time.perf_counter()
    rows: list[Row] = []
    overheads: list = []
    pairs: dict[str, Pair] = {}
    sections: list[str] = []
    hlo: dict[str, dict] = {}
    for name in _PAIRS.value:
        log(f"loading {name}")
        pair = pairs[name] = load_pair(name, _BATCH.value)
        for t in grid["temperatures"]:
            baseline = run_pair(pair, t, grid, rows, overheads)
            hlo.setdefault(name, baseline["hlo"])
            mine = [r for r in rows if r.pair == name and r.temperature == t]
            sections.append(results_table(pair, t, mine, baseline))
    if overheads:
        sections.append(overhead_table(overheads, hlo))
    sections.append(goal_checks(rows))
    plots = make_plots(pairs, rows, grid, _PLOT_DIR.value)
    wall = time.perf_counter() - start
    quick = " (--quick grid)" if _QUICK.value else ""
    command = " ".join(["python", "scripts/bench_decode.py", *sys.argv[1:]])
    head = (
        f"### Decoding benchmark{quick}\n\n"
        f"`{command}` on {benchlib.machine(verbose=True)}, {datetime.date.today().isoformat()}; "
        "`specjax` sources "
        f"sha256 {digest}. Grid: temperatures {grid['temperatures']}, verifiers "
        f"{grid['verifiers']} (greedy at temperature 0 only), K {grid['paths']} (multi-path "
        f"verifiers with the model drafter; K = 1 otherwise), L {grid['lengths']}, "
        f"{_MAX_NEW.value} new tokens, batch {_BATCH.value}, seed {_SEED.value}; each generation "
        f"run {_WARMUP.value} time(s) untimed, then timed in rounds interleaved with "
        f"the autoregressive baseline (at least {_REPEATS.value}, more until a configuration's "
        f"rounds take about {_MIN_TIME.value:g} s, at most {_MAX_REPEATS.value}; `runs` column), "
        "median. Block efficiency = tokens per target "
        "call; acceptance = accepted / proposed draft tokens on the followed path; ± SE = the "
        "standard error of the block efficiency from the accepted-length histogram; speedup = "
        "baseline time / speculative time (compile excluded)."
    )
    tail = (
        f"Wall time {wall:.0f} s ({TOTALS.compile_s:.0f} s of it compiling, "
        f"{TOTALS.generations} generations); 1-minute load average {load_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end (above {os.cpu_count()} means other jobs shared "
        "the CPUs). "
        + (f"Plots: {', '.join(f'`{p}`' for p in plots)}." if plots else "No plots (matplotlib).")
    )
    if code_digest() != digest:
        tail += f" **Warning**: the `specjax` sources changed during the run (now {code_digest()})."
    text = "\n\n".join([head, *sections, tail]) + "\n"
    print(text)
    if _OUTPUT.value:
        path = pathlib.Path(_OUTPUT.value)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        log(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
