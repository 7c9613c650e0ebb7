"""Whether a generation's decode state fits the memory of its devices, known before compiling.

The decode state (KV caches of B rows by S slots, token buffers, the drafter's state) is the part
of a run that grows with the batch and the capacity; the weights are already resident. Its bytes
come from the abstract state (``jax.eval_shape`` of the prefill program, no work done). A state
larger than the devices' free memory would fail inside XLA's allocator with a long message or,
on the host CPU, get the process killed without one; :func:`check_fits` says so first, naming
the knobs that size it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax
import numpy as np


def state_bytes(tree) -> int:
    """Bytes of every array (or ShapeDtypeStruct) leaf of ``tree``."""
    leaves = jax.tree.leaves(tree)
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in leaves)  # (PRNG keys too)


def host_memory() -> int | None:
    """The host's physical memory in bytes (None where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def free_memory(devices: Sequence[jax.Device]) -> int | None:
    """Bytes free on ``devices`` together: each accelerator's limit less what it holds; CPU
    devices share the host's physical memory (counted once). None when nothing is known."""
    total, host = 0, False
    for device in devices:
        stats = device.memory_stats() if device.platform != "cpu" else None
        if stats and "bytes_limit" in stats:
            total += stats["bytes_limit"] - stats.get("bytes_in_use", 0)
        else:
            host = True
    if host:
        memory = host_memory()
        if memory is None:
            return None
        total += memory
    return total


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_fits(state, mesh, rows: int, capacity: int) -> None:
    """One clear error if the decode ``state`` (arrays or ShapeDtypeStructs) of ``rows`` rows
    and ``capacity`` cache slots is larger than the free memory of its devices: ``mesh``'s
    (this process's share of the state on this process's devices), or the default device."""
    devices = jax.local_devices()[:1] if mesh is None else list(mesh.devices.flat)
    local = [d for d in devices if d.process_index == jax.process_index()]
    need = state_bytes(state) * len(local) // len(devices)
    have = free_memory(local)
    if have is not None and need > have:
        raise ValueError(
            f"the decode state of {rows} rows x {capacity} cache slots needs {_gib(need)} but "
            f"the devices have {_gib(have)} free; decode fewer rows at once (CLI: batch_size) "
            "or lower max_new_tokens or the prompt length"
        )
