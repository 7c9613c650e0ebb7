"""Streaming generation: :class:`Stream` yields each step's accepted tokens as they come.

It runs :func:`~specjax.decode.loop.generate_local`'s own two programs (a
:class:`~specjax.decode.loop.Run`), decode one step per call.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import jax
import numpy as np

from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.config import DecodeConfig
from specjax.decode.loop import Generation, Run
from specjax.decode.state import DecodeState, check_target
from specjax.models.decoder import Decoder
from specjax.models.pure import PureModel


class Stream:
    """Streaming generation: iterate to receive each step's newly accepted ids per row.

    ``for new in Stream(...)`` yields ``list[list[int]]`` (one list per row, possibly empty);
    afterwards :attr:`result` holds the :class:`Generation`. It runs :func:`generate`'s own two
    programs (decode one step per call), with one host read of the lengths per step.
    """

    def __init__(
        self,
        target: PureModel | Decoder,
        prompts: Sequence[Sequence[int]],
        config: DecodeConfig,
        drafter=None,
        seed: int = 0,
        buckets: ShapeBuckets = DEFAULT,
    ):
        self._run = Run.of(target, drafter, prompts, config, seed, None, buckets)
        self.result: Generation | None = None
        self.widths_taken: list[int] = []  # with config.widths: each yielded step's width

    def __iter__(self) -> Iterator[list[list[int]]]:
        run = self._run
        run.prepare()  # (first runs of new programs; adaptive widths' costs)
        start = time.perf_counter()
        state = run.start()
        self._seen = np.asarray(run.batch.lengths).copy()
        first = first_tokens = None
        while True:
            state = run.decode(state, 1)
            if first is None:
                now = jax.device_get(state.lengths)
                first = time.perf_counter() - start
                first_tokens = int(np.sum((now - self._seen)[: run.batch.rows]))
            yield self._new(state)
            if self._done:
                break
        seconds = time.perf_counter() - start
        self.result = run.result(state, run.timing(seconds, first, first_tokens))

    def _new(self, state: DecodeState) -> list[list[int]]:
        """Each row's ids committed since the last call (checked first: no garbage is yielded);
        records the latest step's width and whether every row is done."""
        rows = self._run.batch.rows
        widths = self._run.config.widths
        last = state.control.last if widths else None
        now, done, stats, last = jax.device_get((state.lengths, state.done, state.stats, last))
        check_target(stats, range(rows))
        if widths:
            self.widths_taken.append(widths[int(last)])
        tokens = np.asarray(state.tokens) if np.any(now > self._seen) else None
        seen, self._seen, self._done = self._seen, now, bool(np.all(done))
        return [
            tokens[b, seen[b] : now[b]].tolist() if tokens is not None else [] for b in range(rows)
        ]
