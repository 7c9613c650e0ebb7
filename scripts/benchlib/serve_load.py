"""Load on an OpenAI-compatible server: streamed requests at a fixed concurrency, each one's time
to first token and inter-token latency, and the generated tokens per second of all of them."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import time
import urllib.request
from collections.abc import Callable, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Timed:
    """One streamed request.

    Attributes:
      ttft: seconds from sending to the first text.
      itl: mean seconds per token after the first ((last text - first text) / (tokens - 1)),
        vLLM's TPOT: a server that streams several tokens at once is timed per token; None
        below two tokens.
      tokens: completion tokens (the usage's).
    """

    ttft: float
    itl: float | None
    tokens: int


def stream(base: str, body: dict, chat: bool, timeout: float = 600.0) -> Timed:
    """Sends ``body`` (model, messages or prompt, max_tokens, ...) streamed to the server at
    ``base`` (``http://host:port/v1``) and times its text."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    path = "/chat/completions" if chat else "/completions"
    request = urllib.request.Request(
        base + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    first = last = None
    tokens = 0
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            for choice in event.get("choices") or []:
                text = choice["delta"].get("content") if chat else choice.get("text")
                if text:
                    last = time.perf_counter()
                    first = first or last
    if first is None:
        raise RuntimeError(f"{base}: a request streamed no text")
    itl = (last - first) / (tokens - 1) if tokens > 1 else None
    return Timed(first - start, itl, tokens)


@dataclasses.dataclass(frozen=True)
class Load:
    """Requests sent ``concurrency`` at a time, and the wall time of all of them."""

    concurrency: int
    seconds: float
    requests: list[Timed]

    @property
    def tokens_per_s(self) -> float:
        return sum(r.tokens for r in self.requests) / self.seconds

    def ttft(self, q: float) -> float:
        """The ``q``-th percentile time to first token, seconds."""
        return float(np.percentile([r.ttft for r in self.requests], q))

    def itl(self, q: float) -> float | None:
        """The ``q``-th percentile inter-token latency, seconds (None: no request had two)."""
        values = [r.itl for r in self.requests if r.itl is not None]
        return float(np.percentile(values, q)) if values else None


def load(send: Callable[[object], Timed], items: Sequence, concurrency: int) -> Load:
    """``send`` of every item, ``concurrency`` at a time."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(send, items))
    return Load(concurrency, time.perf_counter() - start, done)
