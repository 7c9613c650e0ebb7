"""The run's key figures: top-level keys of the JSON (null with a ``<key>_reason`` where a
section did not measure them) and the first table of the Markdown report."""

from __future__ import annotations

FIGURES: dict[str, tuple[str, str, str]] = {
    "copy_tb_s": (
        "bandwidth",
        "copy ceiling timed inside one program, TB/s (every floor divides by it)",
        ".2f",
    ),
    "copy_host_tb_s": ("bandwidth", "copy timed per host call (the old ceiling), TB/s", ".2f"),
    "smollm2_step_ms_b1": (
        "step",
        "SmolLM2-135M bf16 decode step, B = 1, ctx 1024, S = 2048, N steps in one program, ms",
        ".3f",
    ),
    "smollm2_step_per_call_ms_b1": ("step", "the same step, one per host call, ms", ".3f"),
    "smollm2_ops_per_step_b1": (
        "step",
        "operations the SmolLM2 step launches (compiled HLO of the decode loop's body)",
        "d",
    ),
    "llama8b_step_floor_ratio_b1": (
        "llama8b",
        "Llama-3-8B-shape bf16 in-loop step / (weight + KV bytes) at the copy ceiling, B = 1",
        ".2f",
    ),
    "llama8b_step_floor_ratio_b8": ("llama8b", "the same at B = 8", ".2f"),
    "llama8b_int8_tok_s_ratio_b1": (
        "llama8b",
        "Llama-3-8B shape, int8 weights' tokens/s / bf16's, B = 1",
        ".2f",
    ),
    "llama8b_int8_tok_s_ratio_b8": ("llama8b", "the same at B = 8", ".2f"),
    "head_speedup_t0_median": (
        "speculative",
        "SmolLM2 + learned head (L = 3) vs autoregressive, median over the prompts, T = 0",
        ".2f",
    ),
    "head_speedup_t1_median": ("speculative", "the same at T = 1", ".2f"),
    "smollm2_ops_per_layer": (
        "ops",
        "SmolLM2-shape decode step: operations per layer (3 layers' program - 2 layers')",
        "d",
    ),
}
"""Key -> (section that measures it, what it is, format)."""


def not_run(section: str) -> str:
    return f"the {section} section did not run"


def initial() -> dict:
    """Every figure null, each with the reason that its section has not run."""
    out: dict = {}
    for key, (section, _, _) in FIGURES.items():
        out[key] = None
        out[f"{key}_reason"] = not_run(section)
    return out
