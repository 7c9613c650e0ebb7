"""Where models live: multi-process start-up and loading weights straight onto a device mesh.

* :func:`initialize` starts JAX's multi-controller runtime (``jax.distributed``) from config
  values or, with ``coordinator_address="auto"``, from the cluster environment (SLURM, TPU pods,
  ...); on CPU it selects the gloo collectives. Every process then sees the global device list
  and builds the same global mesh.
* :func:`load_on_mesh` puts a checkpoint's parameters on a mesh without a full copy on any one
  device: orbax restores each array directly into its target sharding; GGUF and safetensors
  weights (read on the host) are placed shard by shard.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from specjax import sharding
from specjax.models import Llama, checkpoint, load_gguf, load_safetensors
from specjax.models.pretrained import build_model, detect_format, load_pretrained


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
    if coordinator_address == "auto":
        jax.distributed.initialize()
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


def _abstract(config) -> Llama:
    return nnx.eval_shape(lambda: Llama(config, rngs=nnx.Rngs(0)))


def load_on_mesh(path: str | Path, dtype, mesh, replicated: bool = False):
    """``(Llama, tokenizer)`` with every parameter on ``mesh`` (tensor-parallel by the logical
    axis rules, or replicated).

    Raises:
      ValueError: the model cannot be split over the mesh's ``model`` axis (names both numbers).
    """
    kind = detect_format(path)
    if kind == "checkpoint":
        meta = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
        config = checkpoint.config_from_json(meta)
        if not replicated:
            sharding.check_model(config, mesh)
        shardings = sharding.param_shardings(_abstract(config), mesh, replicated)
        pre = load_pretrained(path, dtype, sharding=shardings)
        return pre.model, pre.tokenizer
    loader = load_gguf if kind == "gguf" else load_safetensors
    config, params, tokenizer = loader(path, dtype)
    if not replicated:
        sharding.check_model(config, mesh)
    shardings = nnx.to_pure_dict(sharding.param_shardings(_abstract(config), mesh, replicated))
    cast = lambda x: np.asarray(x, config.weight_dtype)  # on the host, before placing
    placed = jax.tree.map(lambda x, s: sharding.put(cast(x), s), params, shardings)
    return build_model(config, placed), tokenizer
