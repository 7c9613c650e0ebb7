"""Interrupts before a CLI's own handlers exist (imports nothing heavy).

``python -m specjax.decode`` imports the ``specjax.decode`` package, and with it JAX, before its
``__main__`` runs: a Ctrl-C in those seconds would end in a traceback. The package calls
:func:`install_early` first; it acts only when this process was started as that CLI.
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = "\ninterrupted: no output file was written\n"


def exit_now(signum, frame) -> None:
    """SIGINT/SIGTERM before the run starts: nothing is open yet, leave at once."""
    del frame
    os.write(2, INTERRUPTED.encode())
    os._exit(128 + signum)


def started_as(module: str) -> bool:
    """Whether the interpreter was started as ``python [options] -m <module>``."""
    argv = list(getattr(sys, "orig_argv", []))
    pairs = zip(argv, [*argv[1:], ""], strict=True)
    return any((a == "-m" and b == module) or a == f"-m{module}" for a, b in pairs)


def install_early(module: str) -> None:
    """Installs :func:`exit_now` for SIGINT and SIGTERM if this process runs ``module``."""
    if started_as(module):
        signal.signal(signal.SIGINT, exit_now)
        signal.signal(signal.SIGTERM, exit_now)
