"""A latency model of SSD, SD and autoregressive decoding: per-call latencies and per-round rates
in, tokens per second out (used by ``scripts/simulate_ssd.py``).

Two resources, the target's devices and the draft's, and the dependencies of one round:

* autoregressive: one target call per token;
* SD: the draft proposes L tokens (L calls), then the target verifies: ``L * t_draft + t_verify``
  per round, ``BE_SD`` tokens per round;
* SSD: the draft serves the speculation (a lookup on a hit; on a miss the just-in-time backup,
  L draft calls, on the critical path), the speculation travels to the target, the target
  verifies while the draft builds the next cache (a glue call and L tree levels), and the outcome
  travels back. Per round ``t_serve + [miss] L t_draft + max(t_verify + 2 t_transfer, t_build)``,
  ``BE_SSD`` tokens per round.

A roofline helper turns model sizes into per-call latencies for projections (weights read once
per call at a fraction of the memory bandwidth, plus a fixed per-call overhead).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Latencies:
    """Seconds per call.

    Attributes:
      verify: one target verification round (tree forward, verifier, commit).
      target_step: one autoregressive target step.
      draft_step: one draft call on B rows (an SD proposal token, a JIT backup token).
      glue: SSD's glue call (L + 1 tokens per row).
      tree_step: one SSD tree level (C branches per row).
      serve: an SSD lookup that hits (the served speculation ready to send).
      transfer: one transfer between the draft and target devices (each direction).
    """

    verify: float
    target_step: float
    draft_step: float
    glue: float
    tree_step: float
    serve: float = 0.0
    transfer: float = 0.0

    def build(self, draft_len: int) -> float:
        """SSD's cache build: the glue and L tree levels."""
        return self.glue + draft_len * self.tree_step


@dataclasses.dataclass(frozen=True)
class Rates:
    """What a decoding run measured (or a projection assumes).

    Attributes:
      draft_len: L.
      block_efficiency_sd: tokens per round of plain SD.
      block_efficiency_ssd: tokens per round of SSD (Saguaro sampling may lower it).
      hit_rate: share of SSD rounds served from the cache.
    """

    draft_len: int
    block_efficiency_sd: float
    block_efficiency_ssd: float
    hit_rate: float


def ssd_round(lat: Latencies, draft_len: int, hit: bool) -> float:
    """Seconds of one SSD round in steady state (a hit, or a miss with the JIT backup)."""
    backup = 0.0 if hit else draft_len * lat.draft_step
    return lat.serve + backup + max(lat.verify + 2 * lat.transfer, lat.build(draft_len))


def predict(lat: Latencies, rates: Rates) -> dict[str, float]:
    """Tokens per second of autoregressive, SD and SSD decoding, and SSD's speedups.

    Returns:
      ``ar``, ``sd``, ``ssd`` (tokens/s), ``ssd_over_sd``, ``ssd_over_ar``, ``sd_over_ar``, and
      ``ssd_round`` / ``sd_round`` (seconds per round) and ``build_bound`` (whether building the
      cache, not verification, sets SSD's pace).
    """
    l_len, h = rates.draft_len, rates.hit_rate
    sd_round = l_len * lat.draft_step + lat.verify
    mean_round = h * ssd_round(lat, l_len, True) + (1 - h) * ssd_round(lat, l_len, False)
    ar = 1.0 / lat.target_step
    sd = rates.block_efficiency_sd / sd_round
    ssd = rates.block_efficiency_ssd / mean_round
    return {
        "ar": ar,
        "sd": sd,
        "ssd": ssd,
        "sd_over_ar": sd / ar,
        "ssd_over_ar": ssd / ar,
        "ssd_over_sd": ssd / sd,
        "sd_round": sd_round,
        "ssd_round": mean_round,
        "build_bound": float(lat.build(l_len) > lat.verify + 2 * lat.transfer),
    }


def roofline_call(
    weight_bytes: float, bandwidth: float, efficiency: float = 0.7, overhead: float = 2e-4
) -> float:
    """Seconds of one memory-bound call: the weights read once at ``efficiency`` of
    ``bandwidth`` (bytes/s), plus a fixed ``overhead`` (launches, synchronisation)."""
    return weight_bytes / (bandwidth * efficiency) + overhead
