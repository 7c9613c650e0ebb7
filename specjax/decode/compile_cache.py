"""The persistent compilation cache: compiled programs written to disk, so that a repeated run
(the same models' shapes, config and shape buckets) loads its programs instead of compiling them.

The CLI turns it on by default (config key ``compilation_cache``); library users call
:func:`enable`. The location is, in order: the ``compilation_cache`` setting if it is a path,
``$SPECJAX_COMPILATION_CACHE``, then ``<specjax cache>/xla`` (``$SPECJAX_CACHE`` or
``~/.cache/specjax``). ``off`` (in either place) turns it off.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

from specjax.models.fetch import default_cache_dir

ENV = "SPECJAX_COMPILATION_CACHE"
"""Environment variable: a directory, or ``off``."""

OFF = ("off", "none", "false", "0")


def resolve(setting: str = "auto") -> Path | None:
    """The cache directory for a ``compilation_cache`` setting (``auto``, ``off`` or a path);
    None when off."""
    setting = (setting or "off").strip()
    if setting.lower() == "auto":
        setting = os.environ.get(ENV, "").strip() or str(default_cache_dir() / "xla")
    if setting.lower() in OFF:
        return None
    return Path(setting).expanduser()


def enable(directory: str | Path, min_compile_seconds: float = 0.5) -> Path:
    """Caches every program that takes at least ``min_compile_seconds`` to compile in
    ``directory`` (created if missing).

    Raises:
      ValueError: ``directory`` cannot be created or written.
    """
    directory = Path(directory).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ValueError(
            f"compilation cache {directory} is not writable ({err.strerror}); set "
            f"compilation_cache to a writable directory or to 'off' (or {ENV}=off)"
        ) from None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_seconds)
    return directory


def configure(setting: str = "auto") -> Path | None:
    """:func:`enable` for a ``compilation_cache`` setting; returns the directory (None: off)."""
    directory = resolve(setting)
    return None if directory is None else enable(directory)
