"""What every CLI shares: bad input becomes one ``error:`` line and exit status 1."""

from __future__ import annotations

import sys

ERRORS = (ValueError, FileNotFoundError, RuntimeError, KeyError, TypeError)
"""What a run raises for bad input (config, files, shapes); anything else is a bug."""


def error_line(err: BaseException) -> str:
    """``error: <message>`` on one line (a multi-line message is joined with ``; ``)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return "error: " + ("; ".join(lines) if lines else type(err).__name__)


def run_or_exit(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; bad input (:data:`ERRORS`) exits 1 with :func:`error_line`."""
    try:
        return fn(*args, **kwargs)
    except ERRORS as err:
        sys.exit(error_line(err))
