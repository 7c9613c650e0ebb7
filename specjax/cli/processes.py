"""Process set-up for a run: JAX's multi-controller runtime and who prints.

:func:`initialize` starts ``jax.distributed`` from config values or, with
``coordinator_address="auto"``, from the cluster environment (SLURM, TPU pods, ...); on CPU it
selects the gloo collectives. Every process then sees the global device list and builds the same
global mesh; only process 0 prints and writes files (:func:`is_main_process`).

A multi-process run also watches its peers (:class:`specjax.cli.peers.Peers`): signals stop
every process, and a process that dies ends the others with one line naming it.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading

import jax
import numpy as np

from specjax.cli.peers import Peers


def initialize(
    coordinator_address: str = "",
    num_processes: int = 1,
    process_id: int = 0,
    num_cpu_devices: int = 0,
    timeout: float = 120.0,
) -> None:
    """Configures devices and, for multi-process runs, calls ``jax.distributed.initialize``.

    Must run before anything touches a JAX device.

    Args:
      coordinator_address: ``host:port`` of process 0, ``"auto"`` to read the cluster
        environment, or ``""`` for a single process.
      num_processes: processes in the run (explicit mode).
      process_id: this process's index (explicit mode).
      num_cpu_devices: if > 0, emulate this many CPU devices in this process.
      timeout: seconds to wait for every process to arrive. JAX aborts the process (a C++
        fatal error) when its own timeout expires, so a watchdog ends it first with one
        ``error:`` line naming who did not arrive, and exit status 1.
    """
    if num_cpu_devices > 0:
        jax.config.update("jax_num_cpu_devices", num_cpu_devices)
    if not coordinator_address:
        if num_processes != 1:
            raise ValueError(
                f"num_processes={num_processes} needs coordinator_address (host:port of "
                "process 0, or 'auto')"
            )
        return
    if jax.config.jax_platforms in (None, "", "cpu") or num_cpu_devices > 0:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # JAX's preemption notifier would take SIGTERM (the run would go on); Peers stops the run.
    jax.config.update("jax_enable_preemption_service", False)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    if faulthandler.is_enabled():  # (absl's app enables it) a crash shows the crashing thread,
        faulthandler.enable(all_threads=False)  # not also the idle threads of Peers
    peers = Peers(process_id, num_processes, coordinator_address)
    peers.listen()  # an interrupt while waiting for the others leaves within GRACE seconds
    if coordinator_address == "auto":
        jax.distributed.initialize()
        peers.start(handlers)
        return
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id {process_id} is not in 0 .. {num_processes - 1}")
    check_address(coordinator_address)
    if process_id == 0:
        others = ", ".join(str(i) for i in range(1, num_processes))
        missing = f"process {others}" if num_processes == 2 else f"one of processes {others}"
        missing += f" did not connect to this coordinator ({coordinator_address})"
    else:
        missing = f"the coordinator (process 0) at {coordinator_address} did not answer"
    watchdog = threading.Timer(
        timeout,
        _give_up,
        (
            f"multi-process start-up: {missing} "
            f"within {timeout:g} s; start all {num_processes} processes with the same "
            "coordinator_address, or raise init_timeout",
        ),
    )
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=int(timeout) + 30,  # the watchdog speaks first
        )
    finally:
        watchdog.cancel()
    peers.start(handlers)


def check_address(address: str) -> None:
    """One clear error unless ``address`` is ``host:port`` with a port in 1..65535."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"coordinator_address {address!r} must be host:port (a port in 1..65535), "
            "e.g. 127.0.0.1:12345, or 'auto'"
        )


def _give_up(message: str) -> None:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    os._exit(1)


def is_main_process() -> bool:
    """Only process 0 prints and writes files."""
    return jax.process_index() == 0


def agree(values: np.ndarray) -> np.ndarray:
    """Process 0's ``values`` in every process (itself when there is one process): what only
    process 0 read, e.g. the ids a resumed run skips, decided alike everywhere."""
    if jax.process_count() == 1:
        return values
    from jax.experimental import multihost_utils

    sent = multihost_utils.broadcast_one_to_all(np.asarray(values).astype(np.int32))
    return np.asarray(sent).astype(np.asarray(values).dtype)
