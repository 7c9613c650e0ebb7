"""specjax.decode: speculative decoding of whole generations (``python -m specjax.decode``).

``generate`` runs a generation on one device, a mesh, a draft on devices of its own or with an
SSD drafter, as compiled programs kept per shape bucket; ``Stream`` yields tokens as they are
accepted; ``ContinuousBatch`` runs many ``Request`` s through a fixed number of slots, yielding
each ``Completion`` as it finishes (batch jobs); ``verifier="autoregressive"`` in the
``DecodeConfig`` is the baseline on the same code path. ``Generation`` holds tokens and
``Metrics``; ``ssd_rates`` / ``ssd_table`` read an SSD run's counters; ``compile_cache``
configures JAX's persistent compilation cache.

The low-level seams (programs, one step, the decode state) are in :mod:`specjax.decode.seams`.

Names load on first use, so importing this package (as ``python -m specjax.decode`` does before
its ``__main__``) imports no JAX and changes no process state.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "AUTOREGRESSIVE": "config",
    "Completion": "batching",
    "ContinuousBatch": "batching",
    "DecodeConfig": "config",
    "EXACT": "buckets",
    "Generation": "loop",
    "Metrics": "metrics",
    "Request": "batching",
    "ShapeBuckets": "buckets",
    "Stream": "stream",
    "Timing": "metrics",
    "generate": "generation",
    "ssd_rates": "ssd",
    "ssd_table": "ssd",
}

__all__ = sorted([*_WHERE, "compile_cache"])


def __getattr__(name: str):
    if name == "compile_cache":
        return importlib.import_module("specjax.decode.compile_cache")
    if name in _WHERE:
        value = getattr(importlib.import_module(f"specjax.decode.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'specjax.decode' has no attribute {name!r}")


def __dir__():
    return __all__
