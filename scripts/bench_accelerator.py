r"""One command that measures specjax on one accelerator (GPU or TPU) in about 8 minutes and
writes one Markdown report and one JSON beside it.

Sections (``--sections``, in this order; each warmed up, then the median of repeated calls,
compile time excluded):

* **versions** -- python, jax, jaxlib, flax, numpy, the device's platform and kind, the backend's
  version, ``nvidia-smi`` (name, driver, memory) where there is one, the date (no host name).
* **bandwidth** -- device-to-device copies of a 2 GiB float32 array (``jnp.copy(x)`` and
  ``x + 1``: bytes read + written over time) and a read-only ``sum``. Every floor below divides
  by the faster copy's bandwidth.
* **decode** -- one new token after a prefilled context (1024 tokens, KV capacity 2048) at
  batch 1 and 8 for SmolLM2-135M in fp32 and bf16 (the real weights when the GGUF is already in
  ``$SPECJAX_CACHE``, else random weights of its shape) and for the Llama-3-8B shape with random
  bf16 weights made on the device (skipped with a note when the device has too little memory);
  against the floor (weight bytes + KV bytes of the context) / copy bandwidth.
  ``--decode_models=llama8b,smollm2_fp32`` picks and orders them (a short lease: the 8B first).
* **verify** -- every verifier of ``specjax.verify`` (greedy, token, block on chains; specinfer
  with and without replacement, spectr, gbv on K = 4 paths) at V = 128256, L = 4, B = 1, 8, 64;
  as a ratio to the time of reading their inputs once at the copy bandwidth.
* **speculative** -- SmolLM2 (fp32, batch 1, 128 new tokens, the chat prompts of
  ``benchlib.chat_prompts``): autoregressive against the n-gram drafter (L = 4) and the learned
  head ``checkpoints/smollm2_eagle`` (FeatureDrafter, L = 3; needs the real weights), each at a
  fixed width and with the width chosen per step (``widths=(0, L)``, the CLI's default), at
  temperature 0 (greedy verifier; output checked against autoregressive) and 1 (block
  verifier; ``--temperatures`` picks): tokens/s, speedup, block efficiency, steps per width,
  and for each adaptive program its calibrated width costs beside its milliseconds per step
  when forced to each width for a whole generation.
* **ssd** -- speculative speculative decoding (``generate_ssd``, temperature 0, 64 new tokens)
  with SmolLM2's first 8 layers as the draft on the host CPU and the target on the accelerator,
  against plain speculation with the same draft on the accelerator (and SSD fused there).

Each section has a time budget (``--budgets``); an item that would start after it is spent is
skipped with a note. An item that fails records its error in the report and the run goes on.
Both files are replaced after every item, so a run stopped by a time limit keeps what finished.
Progress goes to stderr. On the accelerator, from the repository root:

  python scripts/bench_accelerator.py

writes ``benchmarks/accelerator_<platform>_<YYYY-MM-DD>.md`` and ``.json``. ``--quick`` runs the
same code with tiny random models and tiny sizes on whatever device there is (the CPU here) in
well under a minute, writing ``accelerator_quick_<date>.*``; tests/test_bench_accelerator.py
runs it:

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
    "sections", list(accelerator.SECTIONS), f"Sections to run, of {list(accelerator.SECTIONS)}."
)
_BUDGETS = flags.DEFINE_list(
    "budgets", [], "Seconds per section, overriding the defaults, e.g. decode=200,ssd=60."
)
_TEMPS = flags.DEFINE_list(
    "temperatures", [], "The speculative section's temperatures, overriding its 0 and 1."
)
_HEAD = flags.DEFINE_string("head", "checkpoints/smollm2_eagle", "The learned draft head.")
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
    bench = accelerator.Bench(sizes, gguf, _HEAD.value)
    accelerator.log(f"writing {report.md_path} and {report.json_path}")
    for name, run in accelerator.RUNNERS.items():
        if name in _SECTIONS.value:
            report.run(name, sizes.budgets[name], lambda sec, run=run: run(sec, bench))
    report.finish()
    accelerator.log(f"wrote {report.md_path} and {report.json_path}")


if __name__ == "__main__":
    app.run(main)
