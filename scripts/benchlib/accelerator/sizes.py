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
      copy_bytes: bytes of the array copied to measure bandwidth.
      context: committed tokens before the timed decode step; capacity: KV-cache slots.
      batches: decode-step batch sizes.
      verify_vocab: V of the verifier inputs; verify_batches: their B; verify_len: L;
        multi_paths: K of the multi-path verifiers (chains have K = 1).
      new_tokens: tokens generated per speculative generation (batch 1); ssd_new_tokens: per
        SSD section generation.
      prompts: chat prompts (names in ``CHATS``); ssd_prompts: those of the SSD section.
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
    context: int
    capacity: int
    batches: tuple[int, ...]
    verify_vocab: int
    verify_batches: tuple[int, ...]
    verify_len: int
    multi_paths: int
    new_tokens: int
    ssd_new_tokens: int
    prompts: tuple[str, ...]
    ssd_prompts: tuple[str, ...]
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
    context=1024,
    capacity=2048,
    batches=(1, 8),
    verify_vocab=128256,
    verify_batches=(1, 8, 64),
    verify_len=4,
    multi_paths=4,
    new_tokens=128,
    ssd_new_tokens=64,
    prompts=tuple(CHATS),
    ssd_prompts=("summarize",),
    ngram_len=4,
    head_len=3,
    temperatures=(0.0, 1.0),
    ssd_temperatures=(0.0,),  # each temperature compiles 8 programs again (~80 s on an H100)
    ssd_len=4,
    ssd_budget=10,
    draft_layers=8,
    warmup=2,
    repeats=10,
    gen_repeats=3,
    ssd_repeats=1,
    budgets=dict(versions=20, bandwidth=30, decode=110, verify=70, speculative=150, ssd=120),
    # about 8 minutes with the start, typically less (versions, bandwidth, verify end early)
)

QUICK = dataclasses.replace(
    FULL,
    quick=True,
    copy_bytes=8 << 20,
    context=24,
    capacity=64,
    batches=(2,),
    verify_vocab=512,
    verify_batches=(2,),
    new_tokens=12,
    ssd_new_tokens=12,
    prompts=("poem",),
    ssd_prompts=("poem",),
    ssd_budget=5,
    draft_layers=1,
    warmup=1,
    repeats=3,
    gen_repeats=1,
    budgets=dict(versions=30, bandwidth=30, decode=60, verify=60, speculative=60, ssd=60),
)

SECTIONS = {
    "versions": "Versions",
    "bandwidth": "Copy bandwidth",
    "decode": "Decode step against the HBM floor",
    "verify": "Verifiers against a read-once of their inputs",
    "speculative": "Speculative vs autoregressive (SmolLM2, batch 1)",
    "ssd": "SSD: draft on the host CPU, target on the accelerator",
}
"""Section name (``--sections``) -> Markdown heading, in the order they run."""
