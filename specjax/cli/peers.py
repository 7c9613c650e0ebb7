"""Watching the other processes of a multi-process run: signals and lost peers.

SIGINT and SIGTERM stop every process with exit 130 / 143 and one line each (the process that
took the signal tells the others through JAX's key-value store), and a process that dies
(SIGKILL, a crash) is found by the others within :data:`LOST_AFTER` seconds, which then end with
one ``error:`` line naming it, instead of JAX's own C++ fatal error minutes later.
:func:`specjax.cli.processes.initialize` starts the watch; the CLI's ``main`` calls
:func:`leaving` before its interrupt line and :func:`fail` before its error line.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time

import jax

from specjax.cli import interrupts

LOST_AFTER = 20.0
"""Seconds without a sign of life after which a peer process counts as lost. Each process shows
it from a thread of its own (never from the decode loop), twice a second, so long compiles and
long compiled programs do not delay it; 20 s leaves a wide margin over that."""

SUSPECT_AFTER = 5.0
"""Seconds of silence after which a peer counts as lost once a computation of this process has
failed (gloo reports a peer that died as a connection reset by an address, not a process)."""

TICK = 0.5
"""Seconds between two looks at the key-value store (signs of life, stop requests)."""

GRACE = 3.0
"""Seconds the main thread gets to unwind after an interrupt (removing temporary files, closing a
batch job's results) before the process leaves from the watcher thread: a main thread inside one
long compiled program, or inside a collective whose peer is gone, never gets back to Python."""

LEAVE_WAIT = 5.0
"""Seconds process 0 (the coordinator: its exit cuts every other process off) waits for the
others to leave first when the run stops."""

_KEYS = "specjax/"
_STOP = _KEYS + "stop"  # "<process>:<signal>" of the first process to stop (0: it failed)
_ALIVE = _KEYS + "alive/"  # + process: a counter each process bumps every TICK
_LEFT = _KEYS + "left/"  # + process: the process is leaving (stopped or failed)


_PEERS: list[Peers] = []
"""The running :class:`Peers` (none in a single-process run)."""


def leaving(signum: int) -> None:
    """Call before the main thread's interrupt line in a multi-process run (a no-op otherwise):
    from here on this thread alone ends the process; the others are told to stop too, and
    process 0 waits a moment for them to leave first."""
    if _PEERS:
        _PEERS[0].leaving(signum)


def stop_reason() -> str:
    """Why this process stops when another one took a signal first, e.g. "process 1 took
    SIGTERM, so every process stops" ("" when this process took it itself, or in a
    single-process run)."""
    return _PEERS[0].stop_reason() if _PEERS else ""


def fail(line: str, err: BaseException | None = None) -> None:
    """In a multi-process run, ends this process with ``line`` and exit status 1 after telling
    the others (they stop with one line naming this process), without interpreter teardown:
    JAX's shutdown would wait minutes for processes still inside the run. A process stopped
    first by another one's signal or failure prints that instead (its own error follows from
    it), and when ``err`` is a runtime error of JAX's (e.g. a collective whose peer died), a
    peer silent for :data:`SUSPECT_AFTER` seconds is named as lost. A no-op in a
    single-process run."""
    if _PEERS:
        _PEERS[0].fail(line, err)


class Peers:
    """The other processes of a multi-process run, watched from two daemon threads.

    * Signals: SIGINT / SIGTERM also reach a thread of their own (``signal.set_wakeup_fd``), as
      the main thread may be inside one long compiled program. That thread tells the other
      processes (key :data:`_STOP` in JAX's key-value store), gives the main thread
      :data:`GRACE` seconds to unwind, then leaves with the interrupt line and 128 + signal.
    * Peers: every :data:`TICK` seconds this process bumps its own counter and reads the
      others'. Another process's stop stops this one too, with one line naming it and the same
      status (128 + signal, or 1 when it failed); a counter that has not moved for
      :data:`LOST_AFTER` seconds (of a process that did not say it was leaving) ends this
      process with one ``error:`` line naming that process, exit 1.

    What stays JAX's: when process 0 (the coordinator) dies, JAX's client in every other
    process aborts at once with its own C++ fatal error (exit 134). Its
    ``missed_heartbeat_callback`` cannot be replaced from Python (jaxlib 0.10.2 cannot pass the
    status to a Python callable: ``std::bad_cast``), so process 0 waits for the others to leave
    before it exits when the run stops.
    """

    def __init__(self, process_id: int, num_processes: int, address: str):
        self.me, self.count, self.address = process_id, num_processes, address
        self.client = None  # JAX's distributed-runtime client, once connected
        self.stop: tuple[int, int] | None = None  # (process, signal or 0) of the first stop
        self.lost: set[int] = set()
        self.done = False  # the interpreter is exiting normally
        self._lock = threading.Lock()
        self._leave_lock = threading.Lock()  # its holder writes the last line and exits
        self._grace: threading.Timer | None = None
        self._suspect = False  # a computation failed: a silent peer is lost sooner

    def listen(self) -> None:
        """Watches SIGINT / SIGTERM from a thread (call from the main thread)."""
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        _daemon(self._signals, read)

    def start(self, handlers: dict) -> None:
        """After ``jax.distributed.initialize``: puts back the CLI's signal handlers (in case the
        runtime replaced them) and starts watching the other processes."""
        from jax._src import distributed

        for signum, handler in handlers.items():
            if callable(handler):
                signal.signal(signum, handler)
        state = distributed.global_state
        self.client, self.me, self.count = state.client, state.process_id, state.num_processes
        self.address = state.coordinator_address or self.address
        _PEERS[:] = [self]
        atexit.register(self._exiting)  # runs before JAX's own shutdown (registered earlier)
        _daemon(self._watch)

    # What happened, in one line.

    def stop_reason(self) -> str:
        """See :func:`stop_reason` (also for a failure: "process 1 failed, ...")."""
        stop = self.stop
        if stop is None or stop[0] == self.me:
            return ""
        what = f"took {signal.Signals(stop[1]).name}" if stop[1] else "failed"
        return f"process {stop[0]} {what}, so every process stops"

    def stop_line(self) -> str:
        """This process's last line when another one stopped first ("" otherwise)."""
        reason = self.stop_reason()
        if not reason:
            return ""
        if self.stop[1] == 0:
            return f"error: {reason} (its own output says why)\n"
        saved = interrupts.saved_line()  # e.g. a batch job's results so far
        if saved:
            return saved.replace("interrupted: ", f"interrupted: {reason}; ", 1)
        return f"\ninterrupted: {reason}; no output file was written\n"

    def _stop_status(self) -> int:
        return 128 + self.stop[1] if self.stop and self.stop[1] else 1

    def _coordinator_lost(self) -> None:
        """The key-value store has not answered for LOST_AFTER seconds. (JAX's client usually
        ends the process first, with its own fatal error, the moment the coordinator is gone.)"""
        if self.stop is not None and (self.stop[1] or self.stop[0] != self.me):
            self._leave(self.stop_line() or interrupts.INTERRUPTED, self._stop_status(), False)
        self._leave(
            f"error: lost process 0, the coordinator at {self.address} (it stopped or died), so "
            "this process stops too\n",
            1,
            False,
        )

    # Leaving.

    def leaving(self, signum: int) -> None:
        """The main thread is about to write its interrupt line and exit: see :func:`leaving`."""
        self._leave_lock.acquire()  # never released: the process ends
        self._claim_stop(signum)
        self._say_left(wait=True)

    def fail(self, line: str, err: BaseException | None = None) -> None:
        """See :func:`fail`."""
        if isinstance(err, jax.errors.JaxRuntimeError) and self.stop is None:
            self._suspect = True  # the watcher names a lost peer (and leaves) meanwhile
            until = time.monotonic() + SUSPECT_AFTER + 2 * TICK
            try:
                while self.stop is None and time.monotonic() < until:
                    time.sleep(TICK / 5)
            except KeyboardInterrupt:  # another process's signal, sent on to this one
                pass
        self._leave_lock.acquire()
        self._claim_stop(0)
        if self.stop[0] != self.me:
            line = self.stop_line()
        self._leave(line if line.endswith("\n") else line + "\n", self._stop_status(), locked=True)

    def _claim_stop(self, signum: int) -> None:
        """Records this process's stop unless another one stopped first, and tells the others
        (the first stop written wins)."""
        with self._lock:
            mine = self.stop is None
            if mine:
                self.stop = (self.me, signum)
        if self.stop[0] == self.me and self.client is not None:
            _call(self.client.key_value_set, _STOP, f"{self.stop[0]}:{self.stop[1]}", False)

    def _leave(self, line: str, status: int, kv: bool = True, locked: bool = False) -> None:
        if not locked:
            self._leave_lock.acquire()  # another thread already leaving ends the process
        if kv:
            self._say_left(wait=True)
        try:
            sys.stdout.flush()
        except Exception:
            pass
        os.write(2, line.encode())
        os._exit(status)

    def _say_left(self, wait: bool) -> None:
        """Marks this process as leaving; process 0 then waits up to LEAVE_WAIT seconds for the
        others (once it is gone, they can no longer hear of the stop)."""
        if self.client is None:
            return
        _call(self.client.key_value_set, f"{_LEFT}{self.me}", "1", True)
        if not wait or self.me != 0:
            return
        others = {f"{_LEFT}{j}" for j in range(self.count) if j != self.me and j not in self.lost}
        until = time.monotonic() + LEAVE_WAIT
        while others and time.monotonic() < until:
            entries = _call(self.client.key_value_dir_get, _KEYS)
            if entries is None:
                return
            if others <= {_full(k) for k, _ in entries}:
                time.sleep(0.2)  # their last line and exit, before the coordinator goes
                return
            time.sleep(0.1)

    def _exiting(self) -> None:
        self.done = True  # key-value calls fail once JAX shuts down: not an error now

    # The two threads.

    def _signals(self, fd: int) -> None:
        while True:
            for signum in os.read(fd, 64):
                if signum in (signal.SIGINT, signal.SIGTERM):
                    self._signalled(signum)

    def _signalled(self, signum: int) -> None:
        self._start_grace()
        self._claim_stop(signum)

    def _start_grace(self) -> None:
        with self._lock:
            if self._grace is None:
                self._grace = threading.Timer(GRACE, self._interrupted)
                self._grace.daemon = True
                self._grace.start()

    def _interrupted(self) -> None:
        """The main thread did not leave within GRACE seconds of the stop."""
        own = "error: stopped\n"
        if self.stop and self.stop[1]:
            own = interrupts.saved_line() or interrupts.INTERRUPTED
        self._leave(self.stop_line() or own, self._stop_status())

    def _watch(self) -> None:
        beats, failing_since = 0, None
        now = time.monotonic()
        seen = {j: (None, now) for j in range(self.count) if j != self.me}
        while True:
            time.sleep(TICK)
            beats += 1
            try:
                self.client.key_value_set(f"{_ALIVE}{self.me}", str(beats), True)
                entries = {_full(k): v for k, v in self.client.key_value_dir_get(_KEYS)}
            except Exception:  # the coordinator is gone, or JAX is shutting down at the end
                if self.done:
                    return
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > LOST_AFTER:
                    self._coordinator_lost()
                continue
            failing_since = None
            stop = entries.get(_STOP)
            if stop is not None and self.stop is None:
                self._stopped_by(stop)
            now = time.monotonic()
            for j, (value, since) in list(seen.items()):
                if _LEFT + str(j) in entries:
                    del seen[j]  # it said goodbye: no longer watched
                elif entries.get(_ALIVE + str(j)) != value:
                    seen[j] = (entries.get(_ALIVE + str(j)), now)
                elif now - since > (SUSPECT_AFTER if self._suspect else LOST_AFTER):
                    self.lost.add(j)
                    self._leave(
                        f"error: lost {_processes([j])}: no sign of life for {now - since:.0f} s "
                        "(killed or crashed?), so this process stops too\n",
                        1,
                    )

    def _stopped_by(self, stop: str) -> None:
        """Another process took a signal or failed: stop with it."""
        origin, _, signum = stop.partition(":")
        with self._lock:
            if self.stop is not None:
                return
            self.stop = (int(origin), int(signum))
        if self.me != 0:  # nothing to save
            self._leave(self.stop_line(), self._stop_status())
        elif self.stop[1]:  # process 0 writes the files: unwind through the main thread
            os.kill(os.getpid(), self.stop[1])  # (the signal thread starts the GRACE timer)
        else:
            self._start_grace()


def _processes(ids: list[int]) -> str:
    named = ", ".join(str(i) for i in ids)
    return f"process {named}" if len(ids) == 1 else f"processes {named}"


def _full(key: str) -> str:
    return key if key.startswith(_KEYS) else _KEYS + key.lstrip("/")


def _call(fn, *args, timeout: float = 2.0):
    """``fn(*args)`` from a daemon thread, or None if it fails or takes over ``timeout`` s (a
    key-value call to a coordinator that is gone must not hold up leaving)."""
    box = []

    def run():
        try:
            box.append(fn(*args))
        except Exception:
            pass

    thread = _daemon(run)
    thread.join(timeout)
    return box[0] if box else None


def _daemon(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread
