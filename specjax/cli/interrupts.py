"""Signals in the CLIs: one line and exit 128 + signal, at every phase.

Before a run's own handlers exist (imports, config loading) :func:`exit_on_signals` leaves at
once; during the run :func:`handle_signals` unwinds it (temporary files removed); once every
output is written :func:`outputs_complete` says so. ``python -m specjax.decode`` installs the
first from its ``__main__`` before JAX is imported (the ``specjax.decode`` package imports
nothing heavy and, as a library, touches no signal handler).
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


def exit_on_signals() -> None:
    """Installs :func:`exit_now` for SIGINT and SIGTERM."""
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


SAVED: list = []
"""While a run keeps what it finishes (a batch job's results file), a callable giving the
interrupt line that says where (see :func:`saved_line`)."""


def saved_line() -> str:
    """The interrupt line of what the run has kept so far, or ``""`` (nothing kept: the usual
    :data:`INTERRUPTED`). Every way out of an interrupted run uses it, also another thread's
    when the main thread cannot unwind (a multi-process run blocked on a peer that left)."""
    return SAVED[-1]() if SAVED else ""


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
    if late_callback(hook.exc_value):
        return
    sys.__unraisablehook__(hook)


def late_callback(err: BaseException | None) -> bool:
    """Whether ``err`` is a finished read's callback arriving after its event loop closed:
    tensorstore's C++ threads complete a future of an orbax checkpoint read on the loop
    ``asyncio.run`` already closed, and Python prints it as an ignored "RuntimeError: Event
    loop is closed" traceback. The data was read; nothing is lost, so the CLI says nothing."""
    return isinstance(err, RuntimeError) and str(err) == "Event loop is closed"


def outputs_complete() -> None:
    """From here on SIGINT and SIGTERM leave with :data:`FINISHED` (see :func:`exit_finished`)."""
    signal.signal(signal.SIGINT, exit_finished)
    signal.signal(signal.SIGTERM, exit_finished)


def handle_signals() -> None:
    """From here on SIGINT and SIGTERM unwind the run (and are never swallowed)."""
    sys.unraisablehook = resend_swallowed
    signal.signal(signal.SIGINT, raise_interrupted)
    signal.signal(signal.SIGTERM, raise_interrupted)
