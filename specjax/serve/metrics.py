"""The server's Prometheus metrics (``GET /metrics``), in a registry of its own."""

from __future__ import annotations

import prometheus_client as prom

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServeMetrics:
    """Counters, gauges and histograms of one server (its own registry: servers in one process
    do not share counts)."""

    def __init__(self, draft_len: int = 8):
        self.registry = r = prom.CollectorRegistry()
        self.requests = prom.Counter(
            "specjax_requests", "Requests by outcome.", ["outcome"], registry=r
        )
        self.queue_depth = prom.Gauge("specjax_queue_depth", "Requests waiting.", registry=r)
        self.busy_slots = prom.Gauge("specjax_busy_slots", "Slots decoding a request.", registry=r)
        self.prompt_tokens = prom.Counter(
            "specjax_prompt_tokens", "Prompt tokens admitted.", registry=r
        )
        self.generation_tokens = prom.Counter(
            "specjax_generation_tokens", "Tokens generated.", registry=r
        )
        self.target_forwards = prom.Counter(
            "specjax_target_forwards", "Target forwards of finished requests.", registry=r
        )
        self.accepted_tokens = prom.Counter(
            "specjax_accepted_tokens", "Draft tokens accepted (finished requests).", registry=r
        )
        self.draft_tokens = prom.Counter(
            "specjax_draft_tokens", "Draft tokens proposed (finished requests).", registry=r
        )
        self.tokens_per_forward = prom.Gauge(
            "specjax_tokens_per_target_forward",
            "Generated tokens per target forward over the finished requests.",
            registry=r,
        )
        self.acceptance_length = prom.Histogram(
            "specjax_acceptance_length",
            "Draft tokens accepted per target forward.",
            buckets=tuple(range(draft_len + 1)),
            registry=r,
        )
        self.ttft = prom.Histogram(
            "specjax_time_to_first_token_seconds",
            "From a request's arrival to its first tokens.",
            buckets=_LATENCY,
            registry=r,
        )
        self.itl = prom.Histogram(
            "specjax_inter_token_latency_seconds",
            "Between a request's tokens (a chunk's gap over the tokens it brought).",
            buckets=_LATENCY,
            registry=r,
        )
        self._generated = self._forwards = 0

    def finished(self, finished, histogram) -> None:
        """Counts a finished request (``histogram``: its steps by accepted length, or None)."""
        self.target_forwards.inc(finished.target_forwards)
        self.accepted_tokens.inc(finished.accepted_tokens)
        self.draft_tokens.inc(finished.proposed_tokens)
        if finished.target_forwards:
            self._generated += finished.completion_tokens
            self._forwards += finished.target_forwards
            self.tokens_per_forward.set(self._generated / self._forwards)
        if histogram is not None:
            for tau, steps in enumerate(histogram):
                for _ in range(int(steps)):  # (prometheus_client observes one value a call)
                    self.acceptance_length.observe(tau)

    def render(self) -> bytes:
        return prom.generate_latest(self.registry)
