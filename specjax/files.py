"""Writing files so that nothing is ever half-written."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write(path: str | Path, text: str) -> None:
    """Writes ``text`` to ``path`` via a temporary file renamed into place.

    An interrupt or error leaves either the old file or none, never a partial one; the file gets
    the permissions ``open()`` would give it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # what open() would give, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj: Any, **dump_options: Any) -> None:
    """Writes ``obj`` as indented JSON (non-ASCII kept as is) with :func:`atomic_write`."""
    options = {"indent": 2, "ensure_ascii": False} | dump_options
    atomic_write(path, json.dumps(obj, **options) + "\n")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
