"""specjax.decode: the speculative decoding loop (``python -m specjax.decode --config ...``).

``generate`` runs a whole generation as one compiled ``lax.while_loop``; ``Stream`` yields tokens
as they are accepted; ``verifier="autoregressive"`` is the baseline on the same code path.
"""

from specjax.decode.config import AUTOREGRESSIVE, DecodeConfig
from specjax.decode.loop import Generation, Stream, generate
from specjax.decode.metrics import Metrics
from specjax.decode.state import DecodeState
from specjax.decode.step import autoregressive_step, init_state, speculative_step, step

__all__ = [
    "AUTOREGRESSIVE",
    "DecodeConfig",
    "DecodeState",
    "Generation",
    "Metrics",
    "Stream",
    "autoregressive_step",
    "generate",
    "init_state",
    "speculative_step",
    "step",
]
