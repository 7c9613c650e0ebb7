"""The committed family fixtures (``tests/fixtures/families/``, made by
``scripts/make_family_fixtures.py`` with transformers): where they are, their references, and
the same model under its hub-style ``config.hub.json``."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "fixtures" / "families"
FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3_text")
SLIDING = ("qwen2", "mistral", "gemma2", "gemma3_text")
"""The fixtures with sliding-window layers (window 8, shorter than every prompt)."""


def directory(family: str) -> Path:
    """The family's fixture directory (config.json in transformers 5's style)."""
    return ROOT / family


@functools.cache
def reference(family: str) -> dict:
    """``reference.json``: prompts, prompt_logits, greedy, tokenizer references."""
    return json.loads((ROOT / family / "reference.json").read_text())


def hub_style(family: str, where: Path) -> Path:
    """A copy of the fixture at ``where`` whose ``config.json`` is the hub-style one."""
    where.mkdir(parents=True, exist_ok=True)
    for f in directory(family).iterdir():
        if f.name not in ("config.json", "config.hub.json", "reference.json"):
            shutil.copy(f, where / f.name)
    shutil.copy(directory(family) / "config.hub.json", where / "config.json")
    return where
