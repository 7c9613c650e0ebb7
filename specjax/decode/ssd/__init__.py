"""Speculative speculative decoding (SSD, Saguaro), gathered in one place.

While the target verifies a round's speculation, the draft guesses the round's outcome and
drafts the next speculation for each guess; when the outcome is known it is served from that
cache (or by a backup). docs/ssd.md has the algorithm, the cache layout and the exactness
argument. The modules, bottom up:

* :mod:`~specjax.decode.ssd.fanout`: how the branch budget C is spread over outcomes;
* :mod:`~specjax.decode.ssd.speculation`: the data (:class:`SSDConfig`, the speculation cache,
  the outcome, the counters, the draft-side state);
* :mod:`~specjax.decode.ssd.drafter`: :class:`SSDDrafter`, SSD's draft (serve and build; its
  own protocol, not :class:`~specjax.drafters.Drafter`'s propose and commit);
* :mod:`~specjax.decode.ssd.rounds`: the rounds as one fused program or overlapped across two
  devices (:func:`generate_ssd`, also reached through :func:`specjax.decode.generate`), and the
  rates of a run's counters;
* :mod:`~specjax.decode.ssd.timing`: a latency model of SSD, SD and autoregressive decoding.
"""

from specjax.decode.ssd.drafter import SSDDrafter
from specjax.decode.ssd.fanout import geometric_fan_out, parse_fan_out, uniform_fan_out
from specjax.decode.ssd.rounds import generate_ssd, ssd_devices, ssd_rates, ssd_table
from specjax.decode.ssd.speculation import SSDConfig

__all__ = [
    "SSDConfig",
    "SSDDrafter",
    "generate_ssd",
    "geometric_fan_out",
    "parse_fan_out",
    "ssd_devices",
    "ssd_rates",
    "ssd_table",
    "uniform_fan_out",
]
