"""Static decoding knobs: one frozen dataclass, so each combination compiles once."""

from __future__ import annotations

import dataclasses

from specjax import verify
from specjax.sampling import SamplingParams

AUTOREGRESSIVE = "autoregressive"
"""Pseudo-verifier name: decode one target token per step (the baseline)."""


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """How to decode.

    Attributes:
      verifier: ``greedy``, ``token``, ``block`` (one chain), ``specinfer``, ``spectr``, ``gbv``
        (K paths) or ``autoregressive`` (no draft).
      sampling: temperature / top-k / top-p, applied identically to draft and target.
      max_new_tokens: tokens generated per row at most.
      stop_tokens: ids that end a row (kept in the output), e.g. the tokenizer's EOS.
      replacement: for ``specinfer``: whether the drafter drew sibling paths i.i.d. (True) or
        without replacement (False).
    """

    verifier: str = "block"
    sampling: SamplingParams = dataclasses.field(default_factory=SamplingParams)
    max_new_tokens: int = 64
    stop_tokens: tuple[int, ...] = ()
    replacement: bool = True

    def __post_init__(self):
        if self.verifier != AUTOREGRESSIVE:
            verify.get(self.verifier)  # raises, listing the known names
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.verifier == "greedy" and not self.sampling.greedy:
            raise ValueError(
                f"verifier 'greedy' decodes at temperature 0 only (got temperature "
                f"{self.sampling.temperature}); set temperature=0 or use token or block"
            )
        if not self.replacement and self.verifier not in ("specinfer", AUTOREGRESSIVE):
            raise ValueError(
                f"verifier {self.verifier!r} assumes i.i.d. draft paths; set replacement=True "
                "(only specinfer verifies paths drawn without replacement)"
            )

    @property
    def speculative(self) -> bool:
        """False for the autoregressive baseline."""
        return self.verifier != AUTOREGRESSIVE

    @property
    def multipath(self) -> bool:
        """Whether the verifier takes ``[B, K, L]`` drafts."""
        return self.speculative and verify.is_multipath(self.verifier)
