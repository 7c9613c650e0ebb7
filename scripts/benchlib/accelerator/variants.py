"""What a step is measured under, side by side in one process: model variants (a named
function ``model -> model``, one dict) and XLA compiler-option variants (per-compile
``compiler_options``, so no variant leaks into another's program).

A new model switch is one line in :func:`model_variants`; a new compiler A/B one entry in
:data:`STEP_OPTIONS` or :data:`LLAMA8B_OPTIONS`.
"""

from __future__ import annotations

from collections.abc import Callable

import specjax.models
from specjax.models.pure import PureModel, as_pure

Variant = Callable[[PureModel], PureModel]


def model_variants() -> dict[str, Variant]:
    """Name -> ``model -> model``: ``default`` (the model as loaded) first, then each switch
    this specjax has (fused projections, int8 weights appear once those functions exist)."""
    models = specjax.models
    out: dict[str, Variant] = {"default": lambda model: model}
    if hasattr(models, "fuse_projections"):
        out["fused projections"] = _pure(models.fuse_projections)
    if hasattr(models, "quantize_weights"):
        out["int8 weights"] = _pure(lambda model: models.quantize_weights(model, "int8"))
    return out


def _pure(fn: Callable) -> Variant:
    """``fn`` on a :class:`PureModel`, or, where it wants the module, on the Decoder (its
    result made pure again)."""

    def apply(model: PureModel) -> PureModel:
        try:
            return as_pure(fn(model))
        except (TypeError, AttributeError):
            return as_pure(fn(model.module))

    return apply


COMMAND_BUFFER_DEFAULT = (
    "FUSION",
    "CUBLAS",
    "CUBLASLT",
    "CUDNN",
    "CUSTOM_CALL",
    "CONDITIONAL",
    "DYNAMIC_SLICE_FUSION",
)
"""XLA:GPU's default command-buffer (CUDA graph) types in jaxlib 0.10.2 and 0.11.2, read
from the jaxlib wheels: WHILE is not among them. Per-compile
options take only an explicit list: the flag's ``+WHILE`` form is refused there ("not a
valid enum value"), so "+ WHILE" is this list with WHILE added."""

STEP_OPTIONS: dict[str, dict[str, str | int | bool]] = {
    "default": {},
    "graphs off": {"xla_gpu_enable_command_buffer": ""},
    "graphs + WHILE": {
        "xla_gpu_enable_command_buffer": ",".join((*COMMAND_BUFFER_DEFAULT, "WHILE"))
    },
    "min graph size 1": {"xla_gpu_graph_min_graph_size": 1},
}
"""Compiler-option variants of the SmolLM2 in-loop step (GPU only; the CPU runs ``default``)."""

LLAMA8B_OPTIONS: dict[str, dict[str, str | int | bool]] = {
    "default": {},
    "dot merger off": {"xla_gpu_dot_merger_threshold_mb": 0},
}
"""Compiler-option variants of the Llama-3-8B-shape in-loop step (GPU only)."""


def options_for(platform: str, options: dict[str, dict]) -> tuple[dict[str, dict], str | None]:
    """``(variants to run, note or None)``: every variant on a GPU, else ``default`` alone
    (the others are XLA:GPU flags) with a note saying so."""
    if platform == "gpu" or list(options) == ["default"]:
        return options, None
    skipped = ", ".join(name for name in options if name != "default")
    return {"default": {}}, f"compiler-option variants skipped on {platform} (GPU only): {skipped}"
