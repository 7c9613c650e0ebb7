"""Decoding metrics, one definition used by the CLI, the benchmarks and the tests
(docs/architecture.md, "Metrics: one definition").

* block efficiency = tokens emitted per target forward = mean(tau) + 1;
* acceptance rate = accepted draft tokens / draft tokens proposed on the followed path;
* per-position acceptance: of the steps that proposed draft position i, the fraction accepting it;
* accepted-length histogram: steps by tau;
* tokens/s (generated tokens over the timed run: prefill and decode, compilation excluded),
  speedup = autoregressive time / speculative time for the same prompts and length, measured in
  the same run;
* steps per width: decode steps taken at each draft width when the width is chosen per step
  (``DecodeConfig.widths``);
* invalid drafts: steps whose draft was cut at a law that was not a probability vector (a NaN,
  an infinity or a negative entry: a broken drafter; the output stays the target's law, the
  table shows the row only when it is not 0);
* time to first token (prefill plus the first step), decode tokens/s (the tokens after the first
  step over the time after it), compile time (0 when every program was compiled before; with
  the first run of a new program, which XLA makes slower) and the width calibration's time
  (adaptive widths, once per program, before the timing: :mod:`specjax.decode.costs`),
  each reported on its own.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from specjax.decode.state import DecodeState


def _rate(tokens, seconds) -> float:
    """tokens / seconds, NaN without time."""
    return tokens / seconds if seconds > 0 else float("nan")


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock figures of one generation.

    Attributes:
      seconds: the compiled programs end to end (prefill and every step; no compilation).
      compile_seconds: compilation this generation needed.
      time_to_first_token: prefill plus the first step.
      first_step_tokens: tokens the first step emitted (all rows).
      calibration_seconds: the width calibration this generation needed, before its timing
        (:mod:`specjax.decode.costs`; once per program, like compilation).
    """

    seconds: float
    compile_seconds: float = 0.0
    time_to_first_token: float = float("nan")
    first_step_tokens: int = 0
    calibration_seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class Metrics:
    """Aggregates over all rows of one generation."""

    block_efficiency: float
    acceptance_rate: float
    per_position_acceptance: list[float]
    accepted_length_histogram: list[int]
    target_forwards: int
    generated_tokens: int
    seconds: float
    tokens_per_second: float
    speedup: float | None = None

    compile_seconds: float = 0.0
    calibration_seconds: float = 0.0
    time_to_first_token: float = float("nan")
    decode_tokens_per_second: float = float("nan")
    decode_seconds: float = float("nan")
    decode_tokens: int = 0

    steps: int = 0
    accepted_tokens: int = 0
    proposed_tokens: int = 0
    position_accepted: list[int] = dataclasses.field(default_factory=list)
    position_proposed: list[int] = dataclasses.field(default_factory=list)
    width_steps: dict[int, int] = dataclasses.field(default_factory=dict)
    invalid_drafts: int = 0

    @classmethod
    def from_counts(
        cls,
        steps,
        accepted,
        proposed,
        pos_acc,
        pos_prop,
        histogram,
        forwards,
        generated,
        timing: Timing,
    ) -> Metrics:
        """Derives the rates from raw counters (summed over rows) and the timing."""
        seconds = timing.seconds
        decode_seconds = seconds - timing.time_to_first_token
        decode_tokens = int(generated) - timing.first_step_tokens
        return cls(
            block_efficiency=(accepted + steps) / max(steps, 1),
            acceptance_rate=accepted / max(proposed, 1),
            per_position_acceptance=[
                float(a / max(p, 1)) for a, p in zip(pos_acc, pos_prop, strict=True)
            ],
            accepted_length_histogram=[int(x) for x in histogram],
            target_forwards=int(forwards),
            generated_tokens=int(generated),
            seconds=seconds,
            tokens_per_second=_rate(generated, seconds),
            compile_seconds=timing.compile_seconds,
            calibration_seconds=timing.calibration_seconds,
            time_to_first_token=timing.time_to_first_token,
            decode_tokens_per_second=_rate(decode_tokens, decode_seconds),
            decode_seconds=decode_seconds,
            decode_tokens=decode_tokens,
            steps=int(steps),
            accepted_tokens=int(accepted),
            proposed_tokens=int(proposed),
            position_accepted=[int(x) for x in pos_acc],
            position_proposed=[int(x) for x in pos_prop],
        )

    @classmethod
    def from_state(cls, state: DecodeState, timing: Timing | float) -> Metrics:
        """Reads the counters of a finished :class:`DecodeState` (one host transfer; pass it
        without caches); ``timing`` may be plain seconds."""
        timing = timing if isinstance(timing, Timing) else Timing(timing)
        s = jax.device_get(state.stats)
        generated = np.sum(jax.device_get(state.lengths - state.prompt_lengths))
        metrics = cls.from_counts(
            np.sum(s.steps),
            np.sum(s.accepted),
            np.sum(s.proposed),
            np.sum(s.position_accepted, axis=0),
            np.sum(s.position_proposed, axis=0),
            np.sum(s.histogram, axis=0),
            np.max(s.steps),
            generated,
            timing,
        )
        metrics = dataclasses.replace(metrics, invalid_drafts=int(np.sum(s.invalid_drafts)))
        control = state.control
        if control is None:
            return metrics
        steps = jax.device_get(control.steps)
        by_width = {w: int(n) for w, n in zip(control.widths, steps, strict=True)}
        return dataclasses.replace(metrics, width_steps=by_width)

    @classmethod
    def combine(cls, parts: list[Metrics]) -> Metrics:
        """Metrics of several generations run one after another (e.g. prompt batches)."""
        if len(parts) == 1:
            return parts[0]
        total = lambda name: sum(getattr(m, name) for m in parts)
        vector = lambda name: np.sum([getattr(m, name) for m in parts], axis=0)
        combined = cls.from_counts(
            total("steps"),
            total("accepted_tokens"),
            total("proposed_tokens"),
            vector("position_accepted"),
            vector("position_proposed"),
            vector("accepted_length_histogram"),
            total("target_forwards"),
            total("generated_tokens"),
            Timing(
                total("seconds"),
                total("compile_seconds"),
                calibration_seconds=total("calibration_seconds"),
            ),
        )
        decode_seconds, decode_tokens = total("decode_seconds"), total("decode_tokens")
        width_steps: dict[int, int] = {}
        for m in parts:
            for w, n in m.width_steps.items():
                width_steps[w] = width_steps.get(w, 0) + n
        return dataclasses.replace(
            combined,
            width_steps=width_steps,
            invalid_drafts=total("invalid_drafts"),
            time_to_first_token=float(np.mean([m.time_to_first_token for m in parts])),
            decode_seconds=decode_seconds,
            decode_tokens=decode_tokens,
            decode_tokens_per_second=_rate(decode_tokens, decode_seconds),
        )

    def with_speedup(self, baseline_seconds: float) -> Metrics:
        """Adds speedup = baseline (autoregressive) time / this run's time."""
        return dataclasses.replace(self, speedup=baseline_seconds / self.seconds)

    def table(self) -> str:
        """A small aligned text table."""
        rows = [
            ("block efficiency", f"{self.block_efficiency:.3f} tokens / target forward"),
            ("acceptance rate", f"{self.acceptance_rate:.3f}"),
            ("per-position acceptance", " ".join(f"{a:.2f}" for a in self.per_position_acceptance)),
            ("accepted-length histogram", " ".join(map(str, self.accepted_length_histogram))),
            ("target forwards", str(self.target_forwards)),
            *(
                [("steps per width", "  ".join(f"{w}: {n}" for w, n in self.width_steps.items()))]
                if self.width_steps
                else []
            ),
            *(
                [
                    (
                        "invalid drafts",
                        f"{self.invalid_drafts} steps cut a draft at a law that was "
                        "not a probability vector (NaN, inf or < 0)",
                    )
                ]
                if self.invalid_drafts
                else []
            ),
            ("generated tokens", str(self.generated_tokens)),
            ("tokens/s", f"{self.tokens_per_second:.1f} ({self.seconds:.3f} s, compile excluded)"),
        ]
        if not math.isnan(self.time_to_first_token):  # (SSD's fused rounds do not time it)
            rows.append(("time to first token", f"{self.time_to_first_token * 1e3:.1f} ms"))
            rows.append(("decode tokens/s", f"{self.decode_tokens_per_second:.1f}"))
        rows.append(("compile", f"{self.compile_seconds:.2f} s"))
        if self.calibration_seconds:
            once = f"{self.calibration_seconds:.2f} s (once per program)"
            rows.append(("width calibration", once))
        if self.speedup is not None:
            rows.append(("speedup vs autoregressive", f"{self.speedup:.2f}x"))
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
