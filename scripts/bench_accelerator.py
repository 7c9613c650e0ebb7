r"""One command that measures specjax on one accelerator (GPU or TPU) inside a lease's call and
writes one Markdown report and one JSON beside it; the JSON's top level holds the key figures
(``benchlib.accelerator.figures``: null with a ``<key>_reason`` where not measured).

Sections (``--sections``; by default the first six, in this order, the accelerator issue's
figures first; each item warmed up, compile time excluded):

* **versions** -- python, jax, jaxlib, flax, numpy, the device's platform and kind, the backend's
  version, ``nvidia-smi`` (name, driver, memory) where there is one, the date (no host name).
* **bandwidth** -- the copy ceiling timed inside one program: one jitted ``fori_loop`` of 16
  passes ``x = x * c + i`` over a 4 GiB bf16 array (``copy_tb_s``; every floor divides by
  it), beside copies and a read of a 2 GiB float32 array timed one host call per sample (the
  ceiling before, ``copy_host_tb_s``).
* **step** -- SmolLM2-135M bf16 (random weights of its shape unless its GGUF is cached), B = 1,
  context 1024, S = 2048: specjax's decode program (autoregressive, greedy, no stop token) run
  for 256 steps per call, ms per step, median of 3 (``smollm2_step_ms_b1``), under each XLA
  compiler-option variant compiled in this process (``benchlib.accelerator.variants``:
  default; CUDA graphs off; graphs with WHILE; min graph size 1; GPU only) and each model
  variant (``variants.model_variants()``: fused projections, int8 weights, once specjax has
  them); beside it one forward per host call, the forward alone in a ``fori_loop``, the
  operations the compiled step launches (``hlo_ops.count_ops``: per step and per layer), and
  the kernels per step of a ``jax.profiler`` trace of 16 steps.
* **llama8b** -- the Llama-3-8B shape, random bf16 weights made on the device, B = 1 and 8: the
  same in-loop step (64 steps a call) against the floor (weight + KV bytes) / the copy ceiling
  (``llama8b_step_floor_ratio_b1``/``_b8``), tokens/s, ``concatenate``/``transpose``/``copy``
  counts of the compiled program; variants: DotMerger off (GPU), int8 weights
  (``llama8b_int8_tok_s_ratio_b1``/``_b8``) and fused projections once specjax has them.
* **speculative** -- SmolLM2 fp32, batch 1, 128 new tokens, the 23 held-out prompts (20
  MT-bench first turns where they are in ``$SPECJAX_CACHE``, then ``benchlib.chat_prompts``'
  three), each padded to 256 tokens: autoregressive against the learned head
  ``checkpoints/smollm2_eagle`` (FeatureDrafter, L = 3; needs the real weights) at T = 0
  (greedy verifier, output checked against autoregressive) and T = 1 (block verifier): the
  head's median speedup (``head_speedup_t0_median``/``_t1_median``). ``--drafters=ngram,head
  --adaptive`` adds the n-gram drafter (L = 4) and ``widths=(0, L)`` with its width costs.
* **ops** -- operations per layer of the SmolLM2-shape decode step from the compiled program
  (the 2-layer step minus the 1-layer one), per model variant: compiles only, so it runs on a
  CPU too (``--sections=ops``), and its table is printed at the end.
* **decode** (when named) -- one new token per host call against the floor, SmolLM2 fp32/bf16
  and the Llama-3-8B shape (``--decode_models`` picks and orders them); **verify** (when named)
  -- every verifier at V = 128256, B = 1, 8, 64 against a read-once of its inputs; **ssd** (when
  named) -- SSD with SmolLM2's first 8 layers as the draft on the host CPU.

Each section has a time budget (``--budgets``; the default sections' sum to 515 s, compiles
included); an item that would start after it is spent is skipped with a note. An item that
fails records its error and the run goes on. Both files are replaced after every item, so a run
stopped by a time limit keeps what finished. Progress goes to stderr; the key figures and the
ops table are printed last. On the accelerator, from the repository root:

  python scripts/bench_accelerator.py

writes ``benchmarks/accelerator_<platform>_<YYYY-MM-DD>.md`` and ``.json``. The prepared GPU
run for a 15-minute lease is one call of the device tool (``timeout_s=560``; the run takes
about 9 minutes, the machine's start is not in it):

  PYTHONUNBUFFERED=1 PYTHONPATH=. python3 scripts/bench_accelerator.py --out_dir=$OUT --hlo_dir=$OUT

(``--hlo_dir`` adds the compiled SmolLM2 and 8B steps' HLO text, gzipped: five files in all).
The head's speedups need SmolLM2's GGUF (98 MB) and MT-bench's ``question.jsonl`` in
``$SPECJAX_CACHE`` on that machine (it reaches no network); without them those two figures are
null with the reason and everything else is measured. ``--quick`` runs the same code with tiny
random models and tiny sizes on whatever device there is (the CPU here) in about a minute,
writing ``accelerator_quick_<date>.*``; tests/test_bench_accelerator.py runs it:

  python scripts/bench_accelerator.py --quick --out_dir=/tmp/bench
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from pathlib import Path

import benchlib  # scripts/benchlib/ (scripts run with scripts/ on sys.path)
import jax
from absl import app, flags, logging
from benchlib import accelerator

_QUICK = flags.DEFINE_bool("quick", False, "Tiny random models and sizes (a minute on a CPU).")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks", "Where the .md and .json go.")
_SECTIONS = flags.DEFINE_list(
    "sections",
    list(accelerator.DEFAULT_SECTIONS),
    f"Sections to run (they run in this order), of {list(accelerator.SECTIONS)}.",
)
_BUDGETS = flags.DEFINE_list(
    "budgets", [], "Seconds per section, overriding the defaults, e.g. decode=200,ssd=60."
)
_TEMPS = flags.DEFINE_list(
    "temperatures", [], "The speculative section's temperatures, overriding its 0 and 1."
)
_HEAD = flags.DEFINE_string("head", "checkpoints/smollm2_eagle", "The learned draft head.")
_DRAFTERS = flags.DEFINE_list(
    "drafters", [], "The speculative section's drafters, of ngram and head (default: head)."
)
_ADAPTIVE = flags.DEFINE_bool(
    "adaptive", None, "The speculative section also runs widths=(0, L) (default: --quick only)."
)
_HLO_DIR = flags.DEFINE_string(
    "hlo_dir", None, "Also write the compiled SmolLM2 and 8B steps' HLO text (gzipped) here."
)
_DECODE_MODELS = flags.DEFINE_list(
    "decode_models",
    list(accelerator.DECODE_MODELS),
    "The decode section's models, in this order (e.g. llama8b first in a short lease), of "
    f"{list(accelerator.DECODE_MODELS)}.",
)

QUICK_XLA_FLAGS = "--xla_backend_optimization_level=0"
"""--quick only: XLA's LLVM backend without optimisation (its numbers are not timings)."""


def budgets(sizes: accelerator.Sizes) -> dict[str, float]:
    """The section budgets with ``--budgets`` applied."""
    out = dict(sizes.budgets)
    for item in _BUDGETS.value:
        name, sep, seconds = item.partition("=")
        if not sep or name not in accelerator.SECTIONS:
            raise app.UsageError(f"--budgets wants name=seconds with a section name, got {item!r}")
        out[name] = float(seconds)
    return out


def temperatures(values: list[str]) -> tuple[float, ...]:
    """``--temperatures`` as numbers >= 0."""
    try:
        temps = tuple(map(float, values))
    except ValueError:
        temps = (-1.0,)
    if not all(t >= 0 for t in temps):  # NaN fails too
        raise app.UsageError(f"--temperatures wants numbers >= 0, e.g. 0,1; got {values}")
    return temps


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    unknown = sorted(set(_SECTIONS.value) - set(accelerator.SECTIONS))
    if unknown:
        raise app.UsageError(
            f"unknown --sections {unknown}; choose of {list(accelerator.SECTIONS)}"
        )
    bad = sorted(set(_DECODE_MODELS.value) - set(accelerator.DECODE_MODELS))
    if bad or not _DECODE_MODELS.value:
        raise app.UsageError(
            f"--decode_models wants some of {list(accelerator.DECODE_MODELS)}, got {bad or '[]'}"
        )
    if _QUICK.value:  # before JAX starts its backends: compiles 2-4x faster, runs slower
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {QUICK_XLA_FLAGS}".strip()
    sizes = accelerator.QUICK if _QUICK.value else accelerator.FULL
    sizes = dataclasses.replace(
        sizes, budgets=budgets(sizes), decode_models=tuple(_DECODE_MODELS.value)
    )
    if _TEMPS.value:
        sizes = dataclasses.replace(sizes, temperatures=temperatures(_TEMPS.value))
    if _DRAFTERS.value:
        if not set(_DRAFTERS.value) <= {"ngram", "head"}:
            raise app.UsageError(f"--drafters wants some of ngram, head; got {_DRAFTERS.value}")
        sizes = dataclasses.replace(sizes, drafters=tuple(_DRAFTERS.value))
    if _ADAPTIVE.value is not None:
        sizes = dataclasses.replace(sizes, adaptive=_ADAPTIVE.value)
    device = jax.devices()[0]
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    stem = f"accelerator_{'quick' if _QUICK.value else device.platform}_{date}"
    out = Path(_OUT_DIR.value)
    gguf = None if _QUICK.value else accelerator.cached_smollm2()
    meta = {
        "command": benchlib.command(),
        "date": date,
        "quick": _QUICK.value,
        "platform": device.platform,
        "device": f"{device.device_kind} ({device.platform})",
        "sizes": dataclasses.asdict(sizes),
    }
    report = accelerator.Report(out / f"{stem}.md", out / f"{stem}.json", meta)
    hlo_dir = Path(_HLO_DIR.value) if _HLO_DIR.value else None
    bench = accelerator.Bench(sizes, gguf, _HEAD.value, hlo_dir)
    accelerator.log(f"writing {report.md_path} and {report.json_path}")
    for name, run in accelerator.RUNNERS.items():
        if name in _SECTIONS.value:
            report.run(name, sizes.budgets[name], lambda sec, run=run: run(sec, bench))
    report.finish()
    accelerator.log(f"wrote {report.md_path} and {report.json_path}")
    print(report.summary(), flush=True)


if __name__ == "__main__":
    app.run(main)
