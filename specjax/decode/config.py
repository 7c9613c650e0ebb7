"""Static decoding knobs: one frozen dataclass, so each combination compiles once."""

from __future__ import annotations

import dataclasses
import math

from specjax import verify
from specjax.decode.widths import WidthPolicy, policy_of
from specjax.sampling import SamplingParams, is_int

AUTOREGRESSIVE = "autoregressive"
"""Pseudo-verifier name: decode one target token per step (the baseline)."""


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """How to decode.

    Attributes:
      verifier: ``greedy``, ``token``, ``block`` (one chain), ``specinfer``, ``spectr``, ``gbv``
        (K paths) or ``autoregressive`` (no draft).
      sampling: temperature / top-k / top-p of the target's law. A drafter samples with its
        own ``sampling`` (the CLI passes the same); any draft law stays exact, the same one
        usually accepts most.
      max_new_tokens: tokens generated per row at most.
      stop_tokens: ids that end a row (kept in the output), e.g. the tokenizer's EOS.
      widths: draft lengths a step chooses among, ascending, e.g. ``(0, L)``
        (:mod:`specjax.decode.widths`): 0 is a one-token target step, w > 0 a speculative step
        drafting w tokens per path. ``()`` (the default): every step drafts the drafter's L.
      width_policy: how the width is chosen: ``"auto"`` (:class:`~specjax.decode.widths.Goodput`),
        ``"random"`` (uniformly per step, for exactness tests), ``"fixed"``, or a
        :class:`~specjax.decode.widths.WidthPolicy`.
      width_costs: the cost of a step at each width relative to a one-token step, e.g.
        ``(1.0, 1.8)`` (``python -m specjax.calibrate`` measures them into a file the CLI reads);
        ``()``: measured once per compiled program where the output cannot depend on the
        widths (temperature 0, or the ``gumbel`` verifier), else
        :func:`~specjax.decode.widths.guess_costs`, so that a seed fixes the sample
        (:mod:`specjax.decode.costs`).
      rows: each row carries its own sampling and ``max_new_tokens`` in the state
        (:attr:`~specjax.decode.state.DecodeState.sampling`; a continuous batch's per-request
        values), ``sampling`` and ``max_new_tokens`` being the rows' defaults. The programs then
        take the stochastic path whatever ``sampling`` says (:attr:`greedy` is False unless the
        verifier is ``greedy``, whose rows are all at temperature 0).

    The fields from ``widths`` on are keyword-only. Whether draft paths were drawn with or
    without replacement is the drafter's ``replacement``, not a decoding knob.
    """

    verifier: str = "block"
    sampling: SamplingParams = dataclasses.field(default_factory=SamplingParams)
    max_new_tokens: int = 64
    stop_tokens: tuple[int, ...] = ()
    _: dataclasses.KW_ONLY
    widths: tuple[int, ...] = ()
    width_policy: str | WidthPolicy = "auto"
    width_costs: tuple[float, ...] = ()
    rows: bool = False

    def __post_init__(self):
        if not isinstance(self.verifier, str):
            raise TypeError(f"verifier must be a name such as 'block', got {self.verifier!r}")
        if self.verifier != AUTOREGRESSIVE:
            verify.get(self.verifier)  # raises, listing the known names
        if not isinstance(self.sampling, SamplingParams):
            raise TypeError(
                f"sampling must be a SamplingParams, e.g. SamplingParams(temperature=0.7), got "
                f"{self.sampling!r}"
            )
        if not is_int(self.max_new_tokens):
            raise TypeError(f"max_new_tokens must be an int, got {self.max_new_tokens!r}")
        if not isinstance(self.stop_tokens, tuple) or not all(map(is_int, self.stop_tokens)):
            raise TypeError(
                f"stop_tokens must be a tuple of token ids, e.g. (2,), got {self.stop_tokens!r}"
            )
        if any(t < 0 for t in self.stop_tokens):
            raise ValueError(f"stop_tokens must be token ids >= 0, got {self.stop_tokens}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.verifier == "greedy" and not self.sampling.greedy:
            raise ValueError(
                f"verifier 'greedy' decodes at temperature 0 only (got temperature "
                f"{self.sampling.temperature}); set temperature=0 or use token or block"
            )
        if not isinstance(self.rows, bool):
            raise TypeError(f"rows must be True or False, got {self.rows!r}")
        policy_of(self.width_policy)  # raises, naming the known policies
        if self.widths and not self.speculative:
            raise ValueError("widths need a speculative verifier (not 'autoregressive')")
        if self.width_costs and (
            len(self.width_costs) != len(self.widths)
            or not all(0 < c < math.inf for c in self.width_costs)  # NaN fails too
        ):
            raise ValueError(
                f"width_costs {self.width_costs} must give one positive, finite cost per width of "
                f"{self.widths}"
            )

    def autoregressive(self) -> DecodeConfig:
        """The baseline of this config: the same sampling, lengths and stop tokens, no draft."""
        return dataclasses.replace(self, verifier=AUTOREGRESSIVE, widths=(), width_costs=())

    @property
    def greedy(self) -> bool:
        """Whether every row decodes at temperature 0, known at compile time (the static
        decisions: fast paths, measured width costs)."""
        return self.sampling.greedy and (not self.rows or self.verifier == "greedy")

    @property
    def speculative(self) -> bool:
        """False for the autoregressive baseline."""
        return self.verifier != AUTOREGRESSIVE

    @property
    def soft_verdicts(self) -> bool:
        """Whether steps report Σ min(p, q) per position for the width controller: chosen
        widths, and a chain verifier whose acceptance it is (token; block, a lower bound)."""
        return len(self.widths) > 1 and self.verifier in ("token", "block")

    @property
    def multipath(self) -> bool:
        """Whether the verifier takes ``[B, K, L]`` drafts."""
        return self.speculative and verify.is_multipath(self.verifier)
