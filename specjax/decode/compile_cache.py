"""The persistent compilation cache: compiled programs written to disk, so that a repeated run
(the same models' shapes, config and shape buckets) loads its programs instead of compiling them.

The CLI turns it on by default (config key ``compilation_cache``); library users call
:func:`enable`. The location is, in order: the ``compilation_cache`` setting if it is a path,
``$SPECJAX_COMPILATION_CACHE``, then ``<specjax cache>/xla`` (``$SPECJAX_CACHE`` or
``~/.cache/specjax``). ``off`` (in either place) turns it off.

The cache is optional, never a reason for a run to fail:

* ``auto`` whose directory cannot be used (an unwritable home, a file in the way): one warning
  line on stderr, and the run goes on without a cache;
* an explicit directory that can neither be created nor read: one error (the user asked for it);
* an existing directory that is readable but not writable (a pre-warmed cache on a read-only
  file system or shared read-only): programs are loaded from it, new ones are not written;
* a corrupt entry (a truncated or garbled file): JAX warns once, compiles, and the fresh
  program replaces the entry (JAX alone never overwrites an entry, so every later run warned and
  compiled again).

How JAX (0.10) uses the directory (``jax._src.compilation_cache`` and ``jax._src.lru_cache``):
an entry is the file ``<key>-cache`` holding the compressed executable; a compile looks it up
(a read that fails to decompress or deserialize is a warning and a compile), and writes it after
compiling if compiling took at least ``jax_persistent_cache_min_compile_time_secs``; the write
is skipped when the file already exists. The cache object is created once per process, from
``get_file_cache(path)``: :func:`enable` wraps what it returns (:class:`ReplacingCache`) and
resets the cache so that a new directory takes effect.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import jax

from specjax.models.fetch import default_cache_dir

ENV = "SPECJAX_COMPILATION_CACHE"
"""Environment variable: a directory, or ``off``."""

OFF = ("off", "none", "false", "0")

READ_ONLY_MIN_COMPILE_SECONDS = 1e9
"""``jax_persistent_cache_min_compile_time_secs`` for a read-only cache: no program takes that
long to compile, so JAX never tries to write (reads do not look at it)."""

_WARNED: set[str] = set()


def resolve(setting: str = "auto") -> Path | None:
    """The cache directory for a ``compilation_cache`` setting (``auto``, ``off`` or a path);
    None when off."""
    setting = (setting or "off").strip()
    if setting.lower() == "auto":
        setting = os.environ.get(ENV, "").strip() or str(default_cache_dir() / "xla")
    if setting.lower() in OFF:
        return None
    return Path(setting).expanduser()


def _writable(directory: Path) -> bool:
    """Whether files can be created in the existing ``directory`` (a real probe: ``access()``
    says yes to root even on a read-only file system)."""
    probe = directory / f".probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return False
    return True


def access(directory: str | Path) -> str:
    """How ``directory`` can serve as the cache, without creating anything: ``"write"`` (it
    exists and is writable, or can be created) or ``"read"`` (it exists, is readable, and is
    not writable).

    Raises:
      ValueError: neither; the message names the directory, the reason and the fix.
    """
    directory = Path(directory).expanduser()
    fix = f"set compilation_cache to a writable directory or to 'off' (or {ENV}=off)"
    if directory.exists():
        if not directory.is_dir():
            raise ValueError(
                f"compilation cache {directory} is a file, not a directory, so it is not "
                f"writable; {fix}"
            )
        if _writable(directory):
            return "write"
        if os.access(directory, os.R_OK | os.X_OK):
            return "read"
        raise ValueError(f"compilation cache {directory} is neither writable nor readable; {fix}")
    parent = directory.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(
            f"compilation cache {directory} is not writable: {parent} is a file, not a "
            f"directory; {fix}"
        )
    if not _writable(parent):
        raise ValueError(
            f"compilation cache {directory} cannot be created: {parent} is not writable; {fix}"
        )
    return "write"


def enable(directory: str | Path, min_compile_seconds: float = 0.5) -> Path:
    """Uses ``directory`` as the persistent compilation cache: every program that takes at least
    ``min_compile_seconds`` to compile is saved there (the directory is created if missing);
    a readable directory that is not writable is only read (see the module docstring).

    Raises:
      ValueError: ``directory`` can be neither created nor read.
    """
    directory = Path(directory).expanduser()
    mode = access(directory)
    if mode == "write":
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(
                f"compilation cache {directory} is not writable ({err.strerror}); set "
                f"compilation_cache to a writable directory or to 'off' (or {ENV}=off)"
            ) from None
    else:
        _warn_once(
            f"note: compilation cache {directory} is read-only: compiled programs are loaded "
            "from it, new ones are not saved"
        )
        min_compile_seconds = READ_ONLY_MIN_COMPILE_SECONDS
    _install_replacing_cache()
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_seconds)
    _reset_jax_cache()
    return directory


def configure(setting: str = "auto") -> Path | None:
    """:func:`enable` for a ``compilation_cache`` setting; returns the directory (None: off).

    An explicit directory that cannot be used raises ValueError; ``auto`` then warns once on
    stderr and returns None (the run goes on without a cache).
    """
    directory = resolve(setting)
    if directory is None:
        return None
    if (setting or "").strip().lower() != "auto":
        return enable(directory)
    try:
        return enable(directory)
    except ValueError as err:
        _warn_once(f"warning: {err}; running without a compilation cache")
        return None


def _warn_once(line: str) -> None:
    if line not in _WARNED:
        _WARNED.add(line)
        print(line, file=sys.stderr, flush=True)


class ReplacingCache:
    """JAX's file cache, except that writing a key whose file exists replaces the file.

    JAX writes an entry only after a lookup found nothing usable, so an existing file at write
    time is one that failed to load (corrupt): it is replaced, atomically, by the program just
    compiled. Every other call goes to the wrapped cache.
    """

    def __init__(self, base):
        self._base = base

    def __getattr__(self, name):  # _path, path, eviction settings, ...
        return getattr(self._base, name)

    def get(self, key: str):
        return self._base.get(key)

    def put(self, key: str, value: bytes) -> None:
        path = Path(str(self._base._path)) / f"{key}-cache"
        if path.exists():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                tmp.write_bytes(value)
                os.replace(tmp, path)
            except OSError:
                tmp.unlink(missing_ok=True)
            return
        self._base.put(key, value)


def _install_replacing_cache() -> None:
    """Makes JAX build its file cache through :class:`ReplacingCache` (once per process).

    ``jax._src.compilation_cache.get_file_cache(path)`` returns ``(cache, path)``; when it or
    the LRU file cache it returns is not there (another JAX version), nothing changes: a
    corrupt entry then costs a warning and a compile on every run, as in JAX itself.
    """
    try:
        from jax._src import compilation_cache as cc
        from jax._src.lru_cache import LRUCache
    except ImportError:
        return
    original = getattr(cc, "get_file_cache", None)
    if original is None or getattr(original, "_specjax_replacing", False):
        return

    def get_file_cache(path):
        made = original(path)
        if made is not None and isinstance(made[0], LRUCache):
            return ReplacingCache(made[0]), made[1]
        return made

    get_file_cache._specjax_replacing = True
    cc.get_file_cache = get_file_cache


def _reset_jax_cache() -> None:
    """Drops JAX's cache object, so the next compile opens the directory now configured (JAX
    opens it once per process)."""
    try:
        from jax.experimental.compilation_cache import compilation_cache
    except ImportError:
        return
    compilation_cache.reset_cache()
