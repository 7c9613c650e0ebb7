"""The engine: one thread owns the models and their programs and decodes every request.

Its loop admits waiting requests into free slots between decode chunks (the prompt buckets and
insert programs of :class:`~specjax.decode.batching.ContinuousBatch`, driven through its
:class:`~specjax.decode.batching.Slots`), decodes a chunk (one step while a request has had no
ids yet: its first token should not wait a chunk), hands each request's newly committed
ids to its sink, and frees finished, cancelled and stop-string-ended rows (the last with their
counts, read before the row ends). The batches carry each row's sampling and ``max_new_tokens``
(``DecodeConfig.rows``: a live queue cannot know its requests' values in advance), so a row ends
itself at its request's ``max_tokens``. Requests with ``speculative=False`` run in a second set
of slots without a draft (compiled on first use). A sink is called on the engine thread: it must
only hand the event over (an asyncio consumer uses ``loop.call_soon_threadsafe``).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax

from specjax.decode.batch_counts import finished_rows
from specjax.decode.batching import ContinuousBatch, Request, Slots
from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.config import DecodeConfig
from specjax.errors import first_line
from specjax.serve.metrics import ServeMetrics

log = logging.getLogger("specjax.serve")


@dataclasses.dataclass(frozen=True)
class EngineRequest:
    """What the engine decodes for one API request.

    Attributes:
      prompt: token ids.
      max_tokens: ids to generate at most (<= the config's ``max_new_tokens``).
      key_id: what an unseeded request's randomness derives from, with the server's seed.
      speculative: False decodes without a draft.
      sampling: its own sampling values (``{"temperature": 0.7}``: the config's for the
        others; None: the config's).
      seed: its own seed (None: the server's seed and ``key_id``): its draws are those of
        ``generate([prompt], config, seed=seed)``, whatever runs beside it.
    """

    prompt: tuple[int, ...]
    max_tokens: int
    key_id: Any
    speculative: bool = True
    sampling: Mapping[str, Any] | None = None
    seed: int | None = None

    def batch_request(self) -> Request:
        """The :class:`~specjax.decode.batching.Request` the engine decodes."""
        return Request(
            self.key_id,
            list(self.prompt),
            sampling=self.sampling,
            max_new_tokens=self.max_tokens,
            seed=self.seed,
        )


@dataclasses.dataclass(frozen=True)
class Tokens:
    """Ids newly committed for a request (stop tokens left out)."""

    ids: list[int]


@dataclasses.dataclass(frozen=True)
class Finished:
    """A request's end: why, and its counts."""

    finish_reason: str  # stop | length
    prompt_tokens: int
    completion_tokens: int
    target_forwards: int = 0
    accepted_tokens: int = 0
    proposed_tokens: int = 0


@dataclasses.dataclass(frozen=True)
class Failed:
    """The engine could not finish a request (``status``: the HTTP status to answer)."""

    message: str
    status: int = 500


class QueueFull(Exception):
    """No room in the queue (HTTP 429)."""


class Unavailable(Exception):
    """The engine is draining or has failed (HTTP 503)."""


class Ticket:
    """One submitted request: its sink and where it is."""

    def __init__(self, request: EngineRequest, sink: Callable[[Any], None]):
        self.request, self.sink = request, sink
        self.cancelled = False
        self.ending = False  # a stop string matched: end the row, then send its counts
        self.produced = 0  # ids generated so far (stop tokens included)
        self.submitted = time.perf_counter()
        self.last: float | None = None  # when ids last came
        self.slot: int | None = None  # its row while it runs

    def send(self, event) -> None:
        try:
            self.sink(event)
        except RuntimeError:  # the consumer's event loop is gone: nobody to tell
            pass


class Engine:
    """Decodes :class:`EngineRequest` s on its own thread through ``slots`` rows.

    Args:
      target, drafter, config: the models and :class:`~specjax.decode.DecodeConfig`.
      slots: rows decoded together; chunk: decode steps between two looks at the rows.
      seed: the server's seed (a request's draws depend on it and the request's key id).
      buckets: prompt-length and batch buckets; max_queue: requests waiting at most.
      metrics: where the engine's counters go (None: a private :class:`ServeMetrics`).
      on_failure: called with the error line when the engine thread dies.
    """

    def __init__(
        self,
        target,
        drafter,
        config: DecodeConfig,
        *,
        slots: int = 8,
        chunk: int = 8,
        seed: int = 0,
        buckets: ShapeBuckets = DEFAULT,
        max_queue: int = 64,
        metrics: ServeMetrics | None = None,
        on_failure: Callable[[str], None] | None = None,
    ):
        # (rows: any request may bring its own values; sampled ones are refused where the
        # config's verifier, drafter or widths are exact at temperature 0 only: problem)
        # (one prompt per prefill call: the prefill programs are one per prompt bucket, which
        # :meth:`warm_up` can compile before the first request)
        make = lambda d, c: ContinuousBatch(
            target,
            d,
            c,
            slots=slots,
            seed=seed,
            buckets=buckets,
            chunk=chunk,
            rows=True,
            prefill_group=1,
        )
        self.config = config
        self._batches = {True: make(drafter, config)}
        if config.speculative:
            self._batches[False] = make(None, config.autoregressive())
        self.max_queue = max_queue
        self.metrics = metrics or ServeMetrics()
        self.on_failure = on_failure
        self._cond = threading.Condition()
        self._queue: collections.deque[Ticket] = collections.deque()
        self._running: dict[tuple[bool, int], Ticket] = {}  # (lane, slot) -> ticket
        self._lanes: dict[bool, Slots] = {}  # the live rows, per lane (created on first use)
        self._admitting = 0  # taken from the queue, not yet running (in flight all the same)
        self._stopping = False
        self.failed: str | None = None
        self._thread = threading.Thread(target=self._main, name="specjax-engine", daemon=True)

    # -- the API side (any thread) --------------------------------------------------------------

    def problem(self, request: EngineRequest | Any) -> str:
        """Why ``request`` (or a prompt) cannot run (``""`` if it can): for a request, its
        prompt and its own values in the slots it would run in."""
        if isinstance(request, EngineRequest):
            return self._batches[self._lane(request)].problem(request.batch_request())
        return self._batches[True].problem(request)

    def value_problem(self, request: EngineRequest) -> tuple[str, str]:
        """``(field, why)`` for ``request``'s own values in the slots it would run in
        (:meth:`~specjax.decode.batching.ContinuousBatch.value_problem`)."""
        return self._batches[self._lane(request)].value_problem(request.batch_request())

    def _lane(self, request: EngineRequest) -> bool:
        """The slots ``request`` runs in: True speculative (or all, without a draft)."""
        return request.speculative or not self.config.speculative

    def start(self) -> Engine:
        self._thread.start()
        return self

    def warm_up(self, prompt_tokens: int) -> None:
        """Before :meth:`start`: sizes each lane's slots for prompts of up to ``prompt_tokens``
        tokens and compiles (and, with adaptive widths, calibrates) every program they run for
        them: decoding at each row count, prefilling each prompt bucket, moving rows between
        row counts. Requests then join without compiling; a longer prompt grows the slots and
        compiles its programs when it comes."""
        if self._thread.is_alive():
            raise RuntimeError("warm_up runs before start()")
        for lane, batch in self._batches.items():
            widths = batch.widths_upto(prompt_tokens)
            counts = sorted({_rows(batch, n) for n in range(1, batch.slots + 1)})
            slots = Slots(batch, widths[-1], counts[0])
            for i, rows in enumerate(counts):
                slots.resize(rows)
                for width in widths if i == 0 else widths[:1]:
                    request = Request(("warm-up", width), [0] * width)
                    for slot in slots.admit(collections.deque([(None, request)])):
                        slots.step(False)
                        slots.end(slot)
            for old, new in itertools.permutations(counts, 2):
                slots.resize(old)
                slots.resize(new)
            slots.resize(counts[0])
            self._lanes[lane] = slots

    def submit(self, request: EngineRequest, sink: Callable[[Any], None]) -> Ticket:
        """Queues ``request``; its events go to ``sink``. Raises :class:`QueueFull` or
        :class:`Unavailable`."""
        ticket = Ticket(request, sink)
        with self._cond:
            if self.failed is not None or self._stopping:
                raise Unavailable("the server is shutting down" if self._stopping else self.failed)
            if len(self._queue) >= self.max_queue:
                raise QueueFull(f"{len(self._queue)} requests are already waiting")
            self._queue.append(ticket)
            self.metrics.queue_depth.set(len(self._queue))
            self._cond.notify()
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Drops ``ticket``'s request (its client left, or a stop string matched): its slot is
        freed at the next chunk; no more events are sent."""
        with self._cond:
            ticket.cancelled = True
            self._cond.notify()

    def end_early(self, ticket: Ticket) -> None:
        """Ends ``ticket``'s request before its row is done (a stop string matched): the row
        is freed at the next chunk and one :class:`Finished` with its counts is sent."""
        with self._cond:
            ticket.ending = True
            self._cond.notify()

    def stop(self) -> None:
        """Admits nothing new; the thread ends once every accepted request has finished."""
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def join(self, timeout: float | None = None) -> bool:
        """Waits for the thread; returns whether it ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def abort(self, message: str) -> None:
        """Fails every accepted request with ``message`` (503) and ends the thread at the next
        chunk (a drain whose grace period ran out)."""
        with self._cond:
            self._fail_all(message, 503)
            self._cond.notify()

    @property
    def in_flight(self) -> int:
        """Requests accepted and not yet finished."""
        with self._cond:
            return len(self._queue) + self._admitting + len(self._running)

    # -- the engine thread ----------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as err:  # (the requests must hear of any failure)
            line = f"engine failed: {type(err).__name__}: {first_line(err)}"
            log.error(line)
            with self._cond:
                self.failed = line
                self._fail_all(line, 500)
            if self.on_failure is not None:
                self.on_failure(line)

    def _fail_all(self, message: str, status: int) -> None:
        for ticket in itertools.chain(self._queue, self._running.values()):
            if not ticket.cancelled:
                ticket.send(Failed(message, status))
            ticket.cancelled = True
        self._queue.clear()
        self._admitting = 0
        self.metrics.queue_depth.set(0)

    def _loop(self) -> None:
        lanes = self._lanes
        while True:
            with self._cond:
                while not self._queue and not self._running and not self._stopping:
                    self._cond.wait()
                if not self._queue and not self._running:
                    return  # stopping, and nothing left
                taken = self._take()
            for lane, slots in list(lanes.items()):
                self._end_cancelled(lane, slots)
            while taken:  # (requests that came while the last ones were prefilled join too)
                self._admit(taken)
                with self._cond:
                    self._admitting = 0
                    taken = self._take() if self._queue else {}
            for lane, slots in lanes.items():
                if slots.busy:
                    with self._cond:
                        waiting = any(t.request.speculative == lane for t in self._queue)
                    fresh = any(t.last is None for (k, _), t in self._running.items() if k == lane)
                    slots.step(waiting, 1 if fresh else None)
                    self._deliver(lane, slots)
                    if not waiting and slots.busy:
                        self._resize(lane, slots, slots.busy)
            self.metrics.busy_slots.set(len(self._running))

    def _admit(self, taken: dict[bool, collections.deque]) -> None:
        """Inserts the ``taken`` requests into their lanes' free slots and waits for their
        prefill, so that requests arriving meanwhile are admitted before the next chunk."""
        for lane, waiting in taken.items():
            slots = self._lanes.get(lane)
            batch = self._batches[lane]
            if slots is None:  # (later prompts grow the width; it never shrinks, so that the
                # programs of few widths and row counts serve every request)
                first = batch.widths_upto(len(waiting[0][1].prompt))[-1]
                slots = self._lanes[lane] = Slots(batch, first, _rows(batch, len(waiting)))
            else:
                self._resize(lane, slots, slots.busy + len(waiting))
            for slot in slots.admit(waiting):
                ticket = slots.holder[slot][0]
                self._running[lane, slot] = ticket
                ticket.slot = slot
                self.metrics.prompt_tokens.inc(len(ticket.request.prompt))
            jax.block_until_ready(slots.state.lengths)

    def _resize(self, lane: bool, slots: Slots, need: int) -> None:
        """Runs ``slots`` with the smallest batch bucket of rows that holds ``need`` requests: a
        step then costs the requests in flight, not the server's ``slots``."""
        rows = _rows(slots.batch, need)
        if rows == slots.rows:
            return
        moved = slots.resize(rows)
        with self._cond:
            running = {}
            for (k, slot), ticket in self._running.items():
                if k == lane:
                    slot = ticket.slot = moved[slot]
                running[k, slot] = ticket
            self._running = running

    def _take(self) -> dict[bool, collections.deque]:
        """Pops the queued requests the free slots can hold, per lane (under the lock)."""
        free = {}
        for lane in (True, False):
            rows = self._batches[True].slots
            free[lane] = rows - sum(1 for (k, _) in self._running if k == lane)
        taken: dict[bool, collections.deque] = {}
        kept = collections.deque()
        while self._queue:
            ticket = self._queue.popleft()
            lane = self._lane(ticket.request)
            if ticket.cancelled:
                continue
            if free[lane] > 0:
                free[lane] -= 1
                request = ticket.request.batch_request()
                taken.setdefault(lane, collections.deque()).append((ticket, request))
            else:
                kept.append(ticket)
        self._queue = kept
        self._admitting = sum(map(len, taken.values()))
        self.metrics.queue_depth.set(len(kept))
        return taken

    def _end_cancelled(self, lane: bool, slots: Slots) -> None:
        ended = [
            (slot, ticket)
            for (k, slot), ticket in self._running.items()
            if k == lane and (ticket.cancelled or ticket.ending)
        ]
        # (counters read before the rows end: a stopped request's usage keeps its counts)
        self._finish(lane, slots, [s for s, t in ended if not t.cancelled], "stop")
        for slot, ticket in ended:
            if ticket.cancelled:
                slots.end(slot)
                del self._running[lane, slot]

    def _finish(self, lane: bool, slots: Slots, rows: list[int], reason: str) -> None:
        """Ends running ``rows`` early, sending each request its :class:`Finished` and
        counts."""
        counters = finished_rows(slots.state, rows) if rows else None
        for j, slot in enumerate(rows):
            ticket = self._running.pop((lane, slot))
            slots.end(slot)
            stats = counters.stats
            finished = Finished(
                reason,
                len(ticket.request.prompt),
                ticket.produced,
                int(stats.steps[j]),
                int(stats.accepted[j]),
                int(stats.proposed[j]),
            )
            self.metrics.finished(finished, stats.histogram[j])
            if not ticket.cancelled:
                ticket.send(finished)

    def _deliver(self, lane: bool, slots: Slots) -> None:
        """Sends each running request its new ids; ends the finished ones."""
        stops = self.config.stop_tokens
        now = time.perf_counter()
        for slot, ids in slots.new_tokens().items():
            ticket = self._running.get((lane, slot))
            if ticket is None or ticket.cancelled:
                continue
            ticket.produced += len(ids)
            shown = [t for t in ids if t not in stops]  # (a stop token can only end a row)
            self.metrics.generation_tokens.inc(len(ids))
            if ticket.last is None:
                self.metrics.ttft.observe(now - ticket.submitted)
            elif ids:
                self.metrics.itl.observe((now - ticket.last) / len(ids))
            ticket.last = now
            if shown:
                ticket.send(Tokens(shown))
        for (ticket, request), completion, counters, j in slots.harvest():
            del self._running[lane, ticket.slot]
            finished = Finished(
                completion.finish_reason,
                len(request.prompt),
                ticket.produced,
                completion.target_forwards,
                completion.accepted_tokens,
                completion.proposed_tokens,
            )
            self.metrics.finished(finished, counters.stats.histogram[j])
            if not ticket.cancelled:
                ticket.send(finished)


def _rows(batch, requests: int) -> int:
    """The rows to decode ``requests`` requests with: the smallest batch bucket that holds them,
    at most the server's slots."""
    return min(batch.slots, batch.buckets.batch_size(max(requests, 1)))
