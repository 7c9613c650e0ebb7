"""Config checks run before any model is loaded or any program compiled.

Each check raises :class:`ConfigError` (a ``ValueError``) whose text names the key and the fix;
the CLIs print it as one ``error:`` line and exit 1. The checks read files' headers at most: a
missing checkpoint, an unwritable output path or an impossible mesh costs milliseconds, not a
model load.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

F32_TINY, F32_MAX = 2.0**-126, 3.4028234663852886e38  # float32's normal range: smaller is 0


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key and the fix."""


def integer(cfg, key: str, low: int | None = None, high: int | None = None) -> int:
    """``cfg[key]`` as an int in ``[low, high]`` (bools are not integers here)."""
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        interval = _range(low, high, open_low=False)
        raise ConfigError(f"{key} must be {interval}, got {value}")
    return value


def number(
    cfg, key: str, low: float | None = None, high: float | None = None, open_low: bool = False
) -> float:
    """``cfg[key]`` as a finite float in ``[low, high]`` (``(low, high]`` with ``open_low``)."""
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key} must be a finite number, got {value!r}")
    too_low = low is not None and (value <= low if open_low else value < low)
    if too_low or (high is not None and value > high):
        interval = _range(low, high, open_low)
        raise ConfigError(f"{key} must be {interval}, got {value}")
    return float(value)


def choice(cfg, key: str, choices: Iterable[str]) -> str:
    """``cfg[key]``, one of ``choices``."""
    choices = tuple(choices)
    if cfg[key] not in choices:
        names = ", ".join(c if c else '"" (the default)' for c in choices)
        raise ConfigError(f"unknown {key} {cfg[key]!r}; choose one of {names}")
    return cfg[key]


def writable_file(path: str | Path, key: str) -> None:
    """A file can be created or replaced at ``path``."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ConfigError(f"{key} {path} is a directory; give a file path")
    _probe(_existing_parent(path, key), path, key)


def writable_dir(path: str | Path, key: str) -> None:
    """``path`` is, or can be created as, a directory that files can be written into."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{key} {path} is a file, not a directory; choose another path")
    _probe(path if path.is_dir() else _existing_parent(path, key), path, key)


def readable_file(path: str | Path, key: str) -> Path:
    """``path`` is a file this process can read."""
    path = Path(path).expanduser()
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "not found"
        raise ConfigError(f"{key} {path} {what}; give an existing file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{key} {path} is not readable; check its permissions")
    return path


def model_source(path: str, key: str, need_tokenizer: bool = False) -> None:
    """``path`` names a model: ``random:<seed>``, ``smollm2``, or a checkpoint, GGUF file or
    Hugging Face directory that exists (a specjax checkpoint's config is read and checked)."""
    from specjax.models import checkpoint  # only when a path is given
    from specjax.models.pretrained import detect_format

    if not str(path).strip():
        raise ConfigError(
            f"{key} is empty; give a model: --config.{key}=DIR (a Hugging Face directory), a "
            ".gguf file, a specjax checkpoint, 'smollm2' or 'random:<seed>'"
        )
    if path.startswith("random:"):
        seed = path.split(":", 1)[1]
        if not seed.isdigit():
            raise ConfigError(f"{key} {path!r}: random:<seed> needs a non-negative integer seed")
        return
    if path == "smollm2":
        return
    where = Path(path).expanduser()
    if not where.exists():
        raise ConfigError(
            f"{key} {path!r} not found; give a specjax checkpoint directory, a .gguf file, a "
            "Hugging Face directory, 'smollm2' or 'random:<seed>'"
        )
    try:
        detect_format(where)
    except ValueError as err:
        raise ConfigError(f"{key}: {err}") from None
    if where.is_dir() and not checkpoint.is_checkpoint(where):  # a Hugging Face directory
        from specjax.models.safetensors_loader import read_config

        try:
            read_config(where)  # an architecture or key specjax does not implement, named
        except ValueError as err:
            raise ConfigError(f"{key}: {err}") from None
    if checkpoint.is_checkpoint(where):
        try:
            checkpoint.read_config(where)
        except ValueError as err:
            raise ConfigError(f"{key}: {err}") from None
        if need_tokenizer and not checkpoint.has_tokenizer(where):
            raise ConfigError(
                f"{key} {path}: the checkpoint has no tokenizer/ directory, so prompts cannot be "
                "encoded; save it with its tokenizer (checkpoint.save(..., tokenizer))"
            )


SOURCE_FIELDS = ("vocab_size", "max_seq_len", "num_layers")
"""The :class:`~specjax.models.config.ModelConfig` fields :func:`source_fields` reads."""


def source_fields(path: str) -> dict[str, int]:
    """``vocab_size``, ``max_seq_len`` and ``num_layers`` of a model source, read without
    loading it: ``random:<seed>``, a specjax checkpoint (its config) or a Hugging Face directory
    (its ``config.json``); the fields only a load would tell (GGUF files, ``smollm2``, a source
    that is not valid) are missing."""
    try:
        from specjax.models import checkpoint

        if path.startswith("random:"):
            from specjax.models.random import random_config

            c = random_config(0)
        elif checkpoint.is_checkpoint(where := Path(path).expanduser()):
            c = checkpoint.read_config(where)
        elif (where / "config.json").is_file():
            from specjax.models.safetensors_loader import read_config

            c = read_config(where)
        else:
            return {}
    except (OSError, ValueError):
        return {}
    return {k: getattr(c, k) for k in SOURCE_FIELDS}


def draft_layers(value: int, layers: int) -> None:
    """A self-draft's ``draft_layers``: at least one layer, fewer than the target's ``layers``."""
    if not 1 <= value < layers:
        raise ConfigError(
            f"draft_layers must be in [1, {layers - 1}] (the target has {layers} layers), "
            f"got {value}"
        )


def source_limits(cfg, drafter: str, tree: int) -> None:
    """What the model sources' configs tell before they load (:func:`source_fields`): a
    self-draft's ``draft_layers`` against the target's layers, and ``max_new_tokens`` with a
    one-token prompt and ``tree`` positions of draft tree against the smallest ``max_seq_len``
    (the exact bound, with the prompts, comes once they are encoded)."""
    target = source_fields(cfg.target)
    limits = {"target": target.get("max_seq_len")}
    if drafter == "self" and "num_layers" in target:
        draft_layers(cfg.draft_layers, target["num_layers"])
    if drafter == "model":
        limits["draft"] = source_fields(cfg.draft).get("max_seq_len")
    known = {k: v for k, v in limits.items() if v}
    if not known:
        return
    which = min(known, key=known.get)
    limit = known[which]
    if tree + 2 > limit:  # even a one-token prompt and one new token would not fit
        raise ConfigError(
            f"the draft tree (num_paths x num_speculative_tokens + 2 = {tree} positions) leaves "
            f"no room in the {which}'s max_seq_len {limit}; lower num_paths or "
            "num_speculative_tokens"
        )
    if 1 + cfg.max_new_tokens + tree > limit:
        raise ConfigError(
            f"max_new_tokens ({cfg.max_new_tokens}) + draft tree ({tree}) + a one-token prompt "
            f"exceed the {which}'s max_seq_len {limit}; lower max_new_tokens (at most "
            f"{limit - tree - 1})"
        )


def source_has_chat_template(path: str) -> bool | None:
    """Whether a model source's tokenizer has a chat template, read without loading it:
    ``random:<seed>`` (byte-level, none) and a specjax checkpoint's saved tokenizer; None where
    only a load would tell."""
    import json

    from specjax.models import checkpoint
    from specjax.models.tokenizer import MANIFEST

    if path.startswith("random:"):
        return False
    manifest = Path(path).expanduser() / "tokenizer" / MANIFEST
    try:
        if checkpoint.is_checkpoint(Path(path).expanduser()) and manifest.is_file():
            return json.loads(manifest.read_text()).get("chat_template") is not None
    except (OSError, ValueError):
        return None
    return None


def source_vocab(path: str) -> int | None:
    """The vocabulary size of a model source, read without loading it (:func:`source_fields`);
    None where only a load would tell."""
    return source_fields(path).get("vocab_size")


def seed(cfg, headroom: int = 0) -> int:
    """``cfg.seed``, fitting the PRNG's int32 with ``headroom`` to spare (seed + i for batch i)."""
    from specjax.decode.inputs import check_seed  # the library's own check

    value = integer(cfg, "seed")
    try:
        check_seed(value, headroom)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return value


def _existing_parent(path: Path, key: str) -> Path:
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{key} {path}: {parent} is a file, not a directory; choose another path")
    return parent


PROBE_BYTES = 64 * 1024
"""What the write probe writes and syncs: an empty file fits even on a full disk."""


def _probe(directory: Path, path: Path, key: str) -> None:
    try:  # a real probe: access() says yes to root even on read-only file systems
        with tempfile.TemporaryFile(dir=directory) as f:
            f.write(b"\0" * PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise ConfigError(
            f"{key} {path}: {directory} is not writable ({err.strerror}); choose another path"
        ) from None


def _range(low, high, open_low: bool) -> str:
    """``>= 1``, ``> 0``, ``<= 5`` or ``in [0, 1]``."""
    if high is None:
        return f"{'>' if open_low else '>='} {low}"
    if low is None:
        return f"<= {high}"
    return f"in {'(' if open_low else '['}{low}, {high}]"


def distinct_paths(cfg, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> None:
    """No output file is an input file or another output file (it would be overwritten)."""
    seen: dict[Path, str] = {}
    for key in (*inputs, *outputs):
        if not cfg[key]:
            continue
        path = Path(cfg[key]).expanduser().resolve()
        if path in seen and key in outputs:
            raise ConfigError(
                f"{key} {cfg[key]} is also {seen[path]}: it would overwrite it; give {key} a "
                "path of its own"
            )
        seen.setdefault(path, key)
