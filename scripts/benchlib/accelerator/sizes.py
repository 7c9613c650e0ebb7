"""What one ``bench_accelerator.py`` run measures: sizes on an accelerator and in ``--quick``,
and the sections."""

from __future__ import annotations

import dataclasses

from benchlib.chat_prompts import CHATS

# ----------------------------------------------------------------------------- sizes

GIB = 1 << 30


DECODE_MODELS = ("smollm2_fp32", "smollm2_bf16", "llama8b")
"""The decode section's models: SmolLM2-135M in fp32 and bf16, the Llama-3-8B shape in bf16."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    """What one run measures.

    Attributes:
      quick: tiny random stand-ins on whatever device (``--quick``) instead of SmolLM2 and the
        Llama-3-8B shape.
      copy_bytes: bytes of the array copied per host call (the old ceiling).
      ceiling_bytes: bytes of the bf16 array of the in-program copy ceiling; ceiling_passes:
        its read-modify-write passes in one program.
      context: committed tokens before the timed decode step; capacity: KV-cache slots.
      batches: decode-step batch sizes (the decode section's and the Llama-3-8B shape's).
      step_steps: decode steps per program call for SmolLM2's in-loop step; llama_steps: for
        the Llama-3-8B shape's; profile_steps: steps in the profiler trace.
      loop_warmup, loop_repeats: untimed then timed calls of an in-loop program (median).
      verify_vocab: V of the verifier inputs; verify_batches: their B; verify_len: L;
        multi_paths: K of the multi-path verifiers (chains have K = 1).
      new_tokens: tokens generated per speculative generation (batch 1); ssd_new_tokens: per
        SSD section generation.
      prompts: chat prompts (names in ``CHATS``); ssd_prompts: those of the SSD section.
      mtbench: MT-bench first turns put before ``prompts`` in the speculative section (the
        held-out prompts; 0: none; skipped with a note where they are not in the cache).
      prompt_bucket: tokens every speculative prompt is padded to (one compile per
        configuration), or None for specjax's default buckets.
      drafters: the speculative section's drafters, of ``ngram`` and ``head``; adaptive: it
        also runs each with ``widths=(0, L)`` (and the forced-width columns).
      ngram_len: L of the n-gram drafter; head_len: L of the learned head.
      temperatures: of the speculative section; ssd_temperatures: of the SSD section.
      ssd_len: L of SSD and of its plain-speculation baseline; ssd_budget: SSD's branches C;
        draft_layers: layers of the self-draft (the target's first ones).
      warmup, repeats: untimed then timed calls of a kernel (median); gen_repeats,
        ssd_repeats: timed generations per configuration after one warm-up.
      budgets: seconds per section (items that would start later are skipped with a note).
      decode_models: the decode section's models, in order (of :data:`DECODE_MODELS`).
    """

    quick: bool
    copy_bytes: int
    ceiling_bytes: int
    ceiling_passes: int
    context: int
    capacity: int
    batches: tuple[int, ...]
    step_steps: int
    llama_steps: int
    profile_steps: int
    loop_warmup: int
    loop_repeats: int
    verify_vocab: int
    verify_batches: tuple[int, ...]
    verify_len: int
    multi_paths: int
    new_tokens: int
    ssd_new_tokens: int
    prompts: tuple[str, ...]
    ssd_prompts: tuple[str, ...]
    mtbench: int
    prompt_bucket: int | None
    drafters: tuple[str, ...]
    adaptive: bool
    ngram_len: int
    head_len: int
    temperatures: tuple[float, ...]
    ssd_temperatures: tuple[float, ...]
    ssd_len: int
    ssd_budget: int
    draft_layers: int
    warmup: int
    repeats: int
    gen_repeats: int
    ssd_repeats: int
    budgets: dict[str, float]
    decode_models: tuple[str, ...] = DECODE_MODELS


FULL = Sizes(
    quick=False,
    copy_bytes=2 * GIB,
    ceiling_bytes=4 * GIB,
    ceiling_passes=16,
    context=1024,
    capacity=2048,
    batches=(1, 8),
    step_steps=256,
    llama_steps=64,
    profile_steps=16,
    loop_warmup=1,
    loop_repeats=3,
    verify_vocab=128256,
    verify_batches=(1, 8, 64),
    verify_len=4,
    multi_paths=4,
    new_tokens=128,
    ssd_new_tokens=64,
    prompts=tuple(CHATS),
    ssd_prompts=("summarize",),
    mtbench=20,  # + CHATS' three: the 23 held-out prompts of BENCHMARKS.md
    prompt_bucket=256,
    drafters=("head",),
    adaptive=False,
    ngram_len=4,
    head_len=3,
    temperatures=(0.0, 1.0),
    ssd_temperatures=(0.0,),  # each temperature compiles 8 programs again (~80 s on an H100)
    ssd_len=4,
    ssd_budget=10,
    draft_layers=8,
    warmup=2,
    repeats=10,
    gen_repeats=1,  # one round per prompt after a warm-up, as BENCHMARKS' head tables
    ssd_repeats=1,
    budgets=dict(
        versions=10,
        bandwidth=20,
        step=140,
        llama8b=150,
        speculative=170,
        ops=25,
        decode=110,
        verify=70,
        ssd=120,
    ),
    # The default sections (DEFAULT_SECTIONS): 515 s with ~12-16 s GPU compiles per SmolLM2
    # program and ~15-30 s per Llama-3-8B-shape one, inside the 9 minutes of a lease's call.
)

QUICK = dataclasses.replace(
    FULL,
    quick=True,
    copy_bytes=8 << 20,
    ceiling_bytes=8 << 20,
    context=24,
    capacity=64,
    batches=(1, 8),
    step_steps=8,
    llama_steps=8,
    profile_steps=4,
    verify_vocab=512,
    verify_batches=(2,),
    new_tokens=12,
    ssd_new_tokens=12,
    prompts=("poem",),
    ssd_prompts=("poem",),
    mtbench=0,
    prompt_bucket=None,
    drafters=("ngram", "head"),
    adaptive=True,
    ssd_budget=5,
    draft_layers=1,
    warmup=1,
    repeats=3,
    gen_repeats=1,
    # Generous: a quick run checks the code paths, and a shared CPU can run several times
    # slower than alone (the budgets only bound a runaway section).
    budgets={name: 300 for name in FULL.budgets},
)

SECTIONS = {
    "versions": "Versions",
    "bandwidth": "Copy ceiling: inside one program and per host call",
    "step": "SmolLM2 decode step: N steps inside one program, per variant",
    "llama8b": "Llama-3-8B-shape decode step inside one program against the HBM floor",
    "speculative": "Speculative vs autoregressive (SmolLM2, batch 1)",
    "ops": "Operations per layer of the SmolLM2-shape decode step (compiled HLO)",
    "decode": "Decode step per host call against the HBM floor",
    "verify": "Verifiers against a read-once of their inputs",
    "ssd": "SSD: draft on the host CPU, target on the accelerator",
}
"""Section name (``--sections``) -> Markdown heading, in the order they run."""

DEFAULT_SECTIONS = ("versions", "bandwidth", "step", "llama8b", "speculative", "ops")
"""What a run measures unless ``--sections`` says otherwise: the accelerator issue's figures
first. ``decode`` (one step per host call), ``verify`` and ``ssd`` run when named."""
