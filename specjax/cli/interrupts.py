"""Interrupts before a CLI's own handlers exist (imports nothing heavy).

``python -m specjax.decode`` imports the ``specjax.decode`` package, and with it JAX, before its
``__main__`` runs: a Ctrl-C in those seconds would end in a traceback. The package calls
:func:`install_early` first; it acts only when this process was started as that CLI.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

INTERRUPTED = "\ninterrupted: no output file was written\n"
FINISHED = "\ninterrupted after the run finished: every output is complete\n"


def exit_now(signum, frame) -> None:
    """SIGINT/SIGTERM before the run starts: nothing is open yet, leave at once."""
    del frame
    os.write(2, INTERRUPTED.encode())
    os._exit(128 + signum)


def exit_finished(signum, frame) -> None:
    """SIGINT/SIGTERM once every output is written (e.g. during JAX's teardown, which used to
    end with exit 130 and no word): leave at once, saying the outputs are complete."""
    del frame
    os.write(2, FINISHED.encode())
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


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during the run; unwinds so temporary files are removed."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


RECEIVED: list[int] = []
"""Signals the run's handler has taken (see :func:`received`)."""


def raise_interrupted(signum, frame):
    """The run's signal handler: raise :class:`Interrupted` in the main thread."""
    del frame
    RECEIVED.append(signum)
    raise Interrupted(signum)


def received() -> int | None:
    """The first SIGINT/SIGTERM this run took, if any: an error that follows one (a library
    whose threads turned the interrupt into an error of its own, e.g. a checkpoint restore
    reporting a "corrupt" file) is reported as the interrupt it is."""
    return RECEIVED[0] if RECEIVED else None


def resend_swallowed(hook) -> None:
    """``sys.unraisablehook``: an :class:`Interrupted` raised inside a callback Python swallows
    (a garbage-collection callback of JAX's, a ``__del__``) would be lost, so the signal is sent
    again a moment later, when the main thread is back in ordinary code."""
    if isinstance(hook.exc_value, Interrupted):
        threading.Timer(0.05, os.kill, (os.getpid(), hook.exc_value.signum)).start()
        return
    sys.__unraisablehook__(hook)


def outputs_complete() -> None:
    """From here on SIGINT and SIGTERM leave with :data:`FINISHED` (see :func:`exit_finished`)."""
    signal.signal(signal.SIGINT, exit_finished)
    signal.signal(signal.SIGTERM, exit_finished)


def handle_signals() -> None:
    """From here on SIGINT and SIGTERM unwind the run (and are never swallowed)."""
    sys.unraisablehook = resend_swallowed
    signal.signal(signal.SIGINT, raise_interrupted)
    signal.signal(signal.SIGTERM, raise_interrupted)
