"""Continuous batching: many requests through a fixed number of slots, each result handed back
as soon as its request finishes.

The decode state has B *slots* (rows) and a capacity S; the programs are compiled once per
prompt bucket: the decode program (which here stops as soon as enough rows are done, or after a
chunk of steps), one prefill program per (insert count, prompt bucket)
(:func:`~specjax.decode.slots.prefill_rows`, whatever the row count) and one scatter of its rows
into the slots per (rows, insert count). Requests run shortest prompt bucket first, and
when the next one needs a larger bucket the running rows move to slots of that capacity
(:func:`~specjax.decode.slots.grow_program`), so every step pays attention over the capacity
the prompts in flight need, not the longest prompt's. The host loop of
:class:`ContinuousBatch`:

1. inserts waiting requests into the free slots (a prefill call and a scatter call per group),
   growing the slots first when the next request's prompt bucket is larger;
2. decodes until ``refill`` more rows are done (or all, when nothing waits), at most ``chunk``
   steps;
3. harvests the finished rows: each becomes a :class:`Completion`, yielded at once;
4. repeats until every request is done.

A request's randomness depends only on the seed and its id (:func:`~specjax.decode.slots.
request_keys`), so its output is the same whatever slot, batch size, order or resume point it
runs in; a request with a ``seed`` of its own decodes as ``generate([prompt], config, seed=seed)``
does. A request may set its own ``sampling`` and ``max_new_tokens``: the run then carries them per
row (``DecodeConfig.rows``; one program for every value). Requests that cannot run (empty, token
ids outside the vocabulary, too long for the models, bad per-request values) become
``finish_reason="error"`` completions; the others go on.

Adaptive draft widths (``DecodeConfig.widths``) choose one width for all rows of a step; at
temperature > 0 that would make a request's sample depend on its neighbours, so they are refused
there unless the verifier is ``gumbel`` (greedy output, and gumbel's sample, never depend on the
widths).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from specjax import sharding
from specjax.decode.batch_counts import FinishedRows, Progress, Totals, finished_rows
from specjax.decode.buckets import DEFAULT, ShapeBuckets
from specjax.decode.config import DecodeConfig
from specjax.decode.inputs import (
    PreparedBatch,
    check_config,
    check_drafter,
    check_prompt,
    check_seed,
    couple,
)
from specjax.decode.loop import Run
from specjax.decode.metrics import Metrics, Timing
from specjax.decode.programs import PROGRAMS
from specjax.decode.slots import end_row, id_words, leaf_axes, move_rows, prefill_rows
from specjax.decode.state import DecodeState, check_target
from specjax.models.pure import PureModel, as_pure
from specjax.row_sampling import RowSampling
from specjax.sampling import SamplingParams, is_int


@dataclasses.dataclass(frozen=True)
class Request:
    """One prompt of a batch job.

    Attributes:
      id: the request's id (any JSON value; ids must be distinct within a run). Its draws
        depend only on it and the seed.
      prompt: token ids (at least one).
      error: a problem found before the prompt could be tokenized (a malformed input line):
        the request becomes an ``error`` completion.
      sampling: its own :class:`~specjax.sampling.SamplingParams`, or a mapping of some of
        their fields (``{"temperature": 0.7}``: the others the config's; checked when the run
        starts); None: the config's.
      max_new_tokens: its own limit, at most the config's (which sizes the caches); None: the
        config's.
      seed: its own seed: its keys are those :func:`~specjax.decode.generate` gives one prompt
        with this seed, so it reproduces that generation; None: the run's seed and its id.
    """

    id: Any
    prompt: Sequence[int]
    error: str = ""
    sampling: SamplingParams | Mapping[str, Any] | None = None
    max_new_tokens: int | None = None
    seed: int | None = None


@dataclasses.dataclass(frozen=True)
class Completion:
    """A finished request.

    Attributes:
      id: the request's id; index: its position in the requests given.
      token_ids: generated ids (a stop token that ended it is kept).
      finish_reason: ``stop`` (a stop token), ``length`` (``max_new_tokens``) or ``error``.
      prompt_tokens: the prompt's length.
      target_forwards: target forwards (steps) the request took part in.
      accepted_tokens: draft tokens the verifier accepted.
      proposed_tokens: draft tokens proposed on the paths followed.
      error: what was wrong (``finish_reason="error"`` only).
    """

    id: Any
    index: int
    token_ids: list[int]
    finish_reason: str
    prompt_tokens: int
    target_forwards: int = 0
    accepted_tokens: int = 0
    proposed_tokens: int = 0
    error: str = ""


class ContinuousBatch:
    """Decodes requests through ``slots`` rows, refilling finished rows between decode chunks.

    Args:
      target: the target model; drafter: a drafter or None (autoregressive).
      config: the :class:`~specjax.decode.DecodeConfig` (adaptive ``widths`` at temperature 0
        or with the ``gumbel`` verifier).
      slots: B, the rows decoded together (on a mesh rounded up to a multiple of ``data``); a
        run of fewer requests takes only as many rows as it has requests.
      seed: the run's seed; a request's draws depend only on it and the request's id.
      mesh: a device mesh (models placed on it, as for :func:`~specjax.decode.generate`) or
        None. Every process of a multi-process run must call :meth:`run` with the same requests:
        each takes the same decisions from the same replicated values.
      buckets: prompt-length buckets (inserted prompts are padded to them; S fits the longest).
      chunk: the most decode steps between two looks at the rows (progress, refills).
      refill: finished rows that trigger a refill while requests wait (1: refill at once).
      rows: carry per-row values from the start whatever the requests (``DecodeConfig.rows``:
        a live queue, whose requests are not known when its :class:`Slots` start); False:
        :meth:`run` decides from its requests.
      prefill_group: the most prompts one prefill call takes (0: the largest batch bucket that
        the admitted prompts fill). 1 keeps the prefill programs to one per prompt bucket, so a
        server can compile them all at start-up, for ~8% more prefill time on a CPU.
    """

    def __init__(
        self,
        target: PureModel,
        drafter,
        config: DecodeConfig,
        *,
        slots: int = 8,
        seed: int = 0,
        mesh=None,
        buckets: ShapeBuckets = DEFAULT,
        chunk: int = 32,
        refill: int = 1,
        rows: bool = False,
        prefill_group: int = 0,
    ):
        check_config(config)
        self.target = as_pure(target)
        self.drafter = couple(drafter, config) if config.speculative else None
        self.config, self.mesh, self.buckets = config, mesh, buckets
        check_drafter(self.target, self.drafter, config)
        check_seed(seed)
        if config.widths and not config.greedy and config.verifier != "gumbel":
            raise ValueError(
                "adaptive widths choose one draft width for all rows of a step, so at "
                "temperature > 0 a request's sample would depend on the requests beside it; "
                "use a fixed width (widths=()), temperature 0 or verifier 'gumbel' (its sample "
                "does not depend on the widths)"
            )
        if not all(map(is_int, (slots, chunk, refill, prefill_group))):
            raise TypeError(
                f"slots, chunk, refill and prefill_group must be ints, got {slots!r}, {chunk!r}, "
                f"{refill!r}, {prefill_group!r}"
            )
        if slots < 1 or chunk < 1 or not 1 <= refill <= slots or prefill_group < 0:
            raise ValueError(
                f"need slots >= 1, chunk >= 1, 1 <= refill <= slots and prefill_group >= 0; got "
                f"{slots}, {chunk}, {refill}, {prefill_group}"
            )
        multiple = 1 if mesh is None else sharding.axis_size(mesh, "data")
        self.slots = -(-slots // multiple) * multiple
        self._multiple = multiple
        self.seed, self.chunk, self.refill = seed, chunk, refill
        self.prefill_group = prefill_group
        self.metrics: Metrics | None = None
        self.progress: Progress | None = None
        self._per_row = rows  # (a bool: ``Slots.rows`` is the row count)
        # this run's: with ``rows`` where a request has its own values (or from the start)
        self._config = dataclasses.replace(config, rows=True) if rows else config
        self._row_axes: dict = {}  # per state structure: each leaf's row axis (:meth:`_axes`)

    # -- sizes and checks -----------------------------------------------------------------------

    def _tree(self) -> tuple[int, int]:
        """``(K·L + 2, L)``: the draft tree's cache slots (plus root and spare), and L."""
        d = self.drafter
        return (2, 0) if d is None else (d.num_paths * d.draft_len + 2, d.draft_len)

    def _limit(self) -> int:
        limits = [self.target.config.max_seq_len]
        if self.drafter is not None and self.drafter.max_seq_len is not None:
            limits.append(self.drafter.max_seq_len)
        return min(limits)

    def problem(self, request: Request | Sequence[int]) -> str:
        """Why a :class:`Request` (or a prompt) cannot run (``""`` if it can)."""
        if isinstance(request, Request):
            return request.error or self.problem(request.prompt) or self.value_problem(request)[1]
        prompt = request
        try:
            check_prompt(prompt, self.target.config.vocab_size)
        except ValueError as err:
            return str(err)
        tree, _ = self._tree()
        need = len(prompt) + self.config.max_new_tokens + tree
        if need > self._limit():
            return (
                f"prompt ({len(prompt)} tokens) + max_new_tokens ({self.config.max_new_tokens}) "
                f"+ draft tree ({tree}) = {need} positions exceed the model's max_seq_len "
                f"{self._limit()}; shorten the prompt or lower max_new_tokens"
            )
        return ""

    def sampling_of(self, request: Request) -> SamplingParams:
        """The sampling ``request`` decodes with (raises for bad values: :meth:`problem`)."""
        own = request.sampling
        if own is None or isinstance(own, SamplingParams):
            return own or self.config.sampling
        if not isinstance(own, Mapping):
            raise TypeError(
                f"sampling must be a SamplingParams or a mapping of its fields, got {own!r}"
            )
        fields = {f.name for f in dataclasses.fields(SamplingParams)}
        unknown = sorted(set(map(str, own)) - fields)
        if unknown:
            raise ValueError(f"unknown sampling keys {unknown}; use temperature, top_k and top_p")
        return dataclasses.replace(self.config.sampling, **own)

    def value_problem(self, request: Request) -> tuple[str, str]:
        """``(field, why)``: why ``request``'s own values cannot run and the field at fault
        (``temperature``, ``top_k``, ``top_p``, ``max_new_tokens``, ``seed`` or an unknown
        sampling key), or ``("", "")`` when they can."""
        try:
            params = self.sampling_of(request)
        except (TypeError, ValueError) as err:
            return self._bad_sampling_key(request.sampling), f"sampling: {err}"
        limit, own = self.config.max_new_tokens, request.max_new_tokens
        if own is not None and not (is_int(own) and 1 <= own <= limit):
            return "max_new_tokens", (
                f"max_new_tokens must be an int in 1 .. {limit} (the run's max_new_tokens, "
                f"which sizes the caches), got {own!r}; lower it or raise the run's"
            )
        if request.seed is not None:
            try:
                check_seed(request.seed)
            except (TypeError, ValueError) as err:
                return "seed", str(err)
        if params.greedy:
            return "", ""
        why = ""
        if self.config.verifier == "greedy":
            why = (
                f"temperature {params.temperature}: verifier 'greedy' decodes at temperature 0 "
                "only; send temperature 0 or run a token or block verifier"
            )
        elif self.config.widths and self.config.verifier != "gumbel":
            why = (
                f"temperature {params.temperature}: adaptive widths choose one draft width for "
                "all rows, so a sampled request would depend on its neighbours; send temperature "
                "0 or run fixed widths or verifier 'gumbel'"
            )
        elif self.drafter is not None and self.drafter.greedy_only:
            why = (
                f"temperature {params.temperature}: this drafter's fixed paths are exact at "
                "temperature 0 only; send temperature 0 or run num_paths=1"
            )
        return ("temperature", why) if why else ("", "")

    def _bad_sampling_key(self, own) -> str:
        """The first key of a request's sampling mapping that the config's sampling refuses
        (``"sampling"`` where none alone does)."""
        if isinstance(own, Mapping):
            for key, value in own.items():
                try:
                    dataclasses.replace(self.config.sampling, **{str(key): value})
                except (TypeError, ValueError):
                    return str(key)
        return "sampling"

    def _own_values(self, request: Request) -> bool:
        """Whether ``request`` decodes with values other than the config's (a per-row run)."""
        params, config = self.sampling_of(request), self.config.sampling
        same = params == config or (params.greedy and config.greedy)
        return not same or request.max_new_tokens not in (None, self.config.max_new_tokens)

    # -- the run --------------------------------------------------------------------------------

    def run(
        self,
        requests: Sequence[Request],
        on_chunk: Callable[[Progress], None] | None = None,
    ) -> Iterator[Completion]:
        """Yields a :class:`Completion` per request as soon as it finishes (errors first).

        Afterwards :attr:`metrics` holds the aggregate :class:`~specjax.decode.Metrics` and
        :attr:`progress` the final counters (``utilization`` among them).

        Args:
          requests: the requests (distinct ids).
          on_chunk: called with the :class:`Progress` after every decode chunk.
        """
        seen = set()
        if isinstance(requests, str | bytes):
            raise TypeError("requests must be a sequence of Request(id, prompt_ids), not a string")
        for request in requests:
            if not isinstance(request, Request):
                raise TypeError(f"requests must be Request(id, prompt_ids)s, got {request!r}")
            key = _hashable(request.id)
            if key in seen:
                raise ValueError(
                    f"request id {request.id!r} appears more than once; ids must be distinct"
                )
            seen.add(key)
        progress = self.progress = Progress(total=len(requests))
        totals = Totals(self._tree()[1])
        waiting = collections.deque()
        for index, request in enumerate(requests):
            why = self.problem(request)
            if why:
                progress.finished += 1
                progress.errors += 1
                yield Completion(request.id, index, [], "error", _length(request.prompt), error=why)
            else:
                waiting.append((index, request))
        if not waiting:
            self.metrics = totals.metrics(Timing(0.0))
            return

        # Shortest prompt bucket first: S grows with the prompts (a cache slot costs attention
        # in every step), without draining the rows that run.
        waiting = collections.deque(sorted(waiting, key=lambda w: (self._width(w[1]), w[0])))
        per_row = self.config.rows or self._per_row or any(self._own_values(r) for _, r in waiting)
        self._config = dataclasses.replace(self.config, rows=per_row)
        rows = min(self.slots, -(-len(waiting) // self._multiple) * self._multiple)
        slots = Slots(self, self._width(waiting[0][1]), rows)
        while waiting or slots.busy:
            slots.admit(waiting)
            slots.step(bool(waiting))
            for _, completion, counters, j in slots.harvest():
                totals.add(counters, j)
                progress.finished += 1
                progress.generated += len(completion.token_ids)
                progress.accepted += completion.accepted_tokens
                progress.proposed += completion.proposed_tokens
                progress.row_steps += completion.target_forwards
                yield completion
            progress.slot_steps = slots.slot_steps
            progress.seconds = slots.seconds
            if on_chunk is not None:
                on_chunk(progress)
        progress.seconds = seconds = slots.seconds
        totals.forwards = progress.slot_steps // slots.rows
        state = slots.state
        widths = jax.device_get(state.control.steps) if state.control is not None else None
        timing = Timing(seconds, slots.compile_seconds)
        self.metrics = totals.metrics(timing, self.config.widths, widths)

    def _longest_prompt(self) -> int:
        """The longest prompt the models take with ``max_new_tokens`` and the draft tree."""
        tree, _ = self._tree()
        return self._limit() - self.config.max_new_tokens - tree

    def _width(self, request: Request) -> int:
        """The prompt bucket of ``request``: the prompt width of a run that can hold it."""
        return self.buckets.prompt_length(len(request.prompt), self._longest_prompt())

    def widths_upto(self, tokens: int) -> list[int]:
        """The prompt buckets (ascending) that prompts of 1 .. ``tokens`` tokens are prefilled
        at, ``tokens`` capped at the longest prompt the models take."""
        limit = self._longest_prompt()
        top = self.buckets.prompt_length(max(1, min(tokens, limit)), limit)
        return sorted({b for b in self.buckets.prompt if b < top} | {top})

    def _start(self, width: int, b: int) -> Run:
        """``b`` empty slots and their programs for prompts of up to ``width`` tokens (S is
        ``width + max_new_tokens`` plus the draft tree)."""
        tree, l_len = self._tree()
        batch = PreparedBatch(
            prompts=np.zeros((b, 1), np.int32),
            lengths=np.ones((b,), np.int32),
            active=np.zeros((b,), bool),
            rows=0,
            capacity=width + self.config.max_new_tokens + tree,
            buffer=width + self.config.max_new_tokens + l_len + 1,
        )
        return Run(self.target, self.drafter, batch, self._config, self.seed, self.mesh)

    def _grow(self, run: Run, state: DecodeState, width: int) -> tuple[Run, DecodeState, float]:
        """The rows of ``state`` moved to new slots for prompts of ``width`` tokens; returns the
        new run, its state and the seconds spent compiling."""
        bigger = self._start(width, state.batch)
        start = time.perf_counter()
        args = (state, bigger.start())
        program = PROGRAMS.grow(args, self.mesh)
        return bigger, program(*args), bigger.compile_seconds + time.perf_counter() - start

    def _groups(self, taken: list, width: int) -> list[list]:
        """``taken`` requests (all fitting prompts of ``width`` tokens) split into insert calls:
        by prompt bucket, shortest first, each bucket into batch-bucket sizes (largest first).
        A call pads its prompts to its longest: one bucket per call keeps a short prompt from
        being prefilled at a long one's width, and bucket sizes keep the programs few and free
        of padding rows."""
        by_width: dict[int, list] = {}
        for entry in sorted(taken, key=lambda e: len(e[1].prompt)):
            bucket = self.buckets.prompt_length(len(entry[1].prompt), width)
            by_width.setdefault(bucket, []).append(entry)
        groups, most = [], self.prefill_group or len(taken)
        for entries in by_width.values():
            while entries:
                fit = min(len(entries), most)
                size = max([b for b in self.buckets.batch if b <= fit], default=1)
                groups.append(entries[:size])
                entries = entries[size:]
        return groups

    def _insert(
        self, run: Run, longest: int, state: DecodeState, taken, slots
    ) -> tuple[DecodeState, float]:
        """Prefills ``taken`` requests into ``slots`` of ``run`` (for prompts of up to
        ``longest`` tokens); returns the state and the seconds spent compiling."""
        count = len(taken)
        width = self.buckets.prompt_length(max(len(r.prompt) for _, r in taken), longest)
        prompts = np.zeros((count, width), np.int32)
        lengths = np.ones((count,), np.int32)
        words = np.zeros((count, 2), np.uint32)
        seeds, seeded = np.zeros((count,), np.int32), np.zeros((count,), bool)
        limits = np.full((count,), self.config.max_new_tokens, np.int32)
        for j, (_, request) in enumerate(taken):
            prompts[j, : len(request.prompt)] = request.prompt
            lengths[j] = len(request.prompt)
            words[j] = id_words(request.id)
            if request.seed is not None:
                seeds[j], seeded[j] = request.seed, True
            if request.max_new_tokens is not None:
                limits[j] = request.max_new_tokens
        slots = np.asarray(slots, np.int32)
        put = run.put_scalar
        rows = ()  # the rows' own values, where the state carries them
        if self._config.rows:
            params = RowSampling.of([self.sampling_of(r) for _, r in taken])
            rows = (jax.tree.map(put, params), put(limits))
        args = (
            run.target,
            run.drafter,
            put(prompts),
            put(lengths),
            put(words),
            put(np.asarray(self.seed, np.int32)),
            put(seeds),
            put(seeded),
            *rows,
        )
        sizes = dict(capacity=run.batch.capacity, buffer=run.batch.buffer)
        start = time.perf_counter()
        prefill = PROGRAMS.prefill_rows(args, sizes, self._config, self.mesh)
        compile_seconds = time.perf_counter() - start
        small = prefill(*args)
        start = time.perf_counter()
        scatter_args = (state, small, put(slots))
        axes = self._axes(args, sizes, small, state)
        scatter = PROGRAMS.scatter(scatter_args, axes, self.mesh)
        compile_seconds += time.perf_counter() - start
        return scatter(*scatter_args), compile_seconds

    def _axes(self, args, sizes: dict, small: DecodeState, state: DecodeState) -> tuple:
        """Each state leaf's row axis (:func:`~specjax.decode.slots.leaf_axes`): read off
        ``small`` (n rows) and ``state`` (B rows) where n != B, else off ``small`` and the
        abstract prefill of n + 1 rows (once per state structure)."""
        structure = jax.tree.structure(state)
        if structure not in self._row_axes:
            other = state
            if small.batch == state.batch:
                wider = lambda x: jax.ShapeDtypeStruct((x.shape[0] + 1, *x.shape[1:]), x.dtype)
                more = jax.tree.map(lambda x: wider(x) if x.ndim else x, args[2:])
                rows = functools.partial(prefill_rows, **sizes, widths=self._config.widths)
                other = jax.eval_shape(rows, *args[:2], *more)
            self._row_axes[structure] = leaf_axes(small, other)
        return self._row_axes[structure]


class Slots:
    """The live rows of a :class:`ContinuousBatch`: requests inserted into free slots
    (:meth:`admit`), decoded a chunk at a time (:meth:`step`), finished rows harvested
    (:meth:`harvest`). :meth:`ContinuousBatch.run` drives it over a fixed list of requests; a
    server over a live queue, reading each row's new ids (:meth:`new_tokens`) and ending
    cancelled rows (:meth:`end`).

    Args:
      batch: the :class:`ContinuousBatch` (models, config, sizes).
      width: the prompt bucket to start with (the slots grow when a wider prompt comes).
      rows: B (default ``batch.slots``).
    """

    def __init__(self, batch: ContinuousBatch, width: int, rows: int | None = None):
        self.batch = batch
        self.rows = batch.slots if rows is None else rows
        self.width = width  # the longest prompt the slots take (they grow for a longer one)
        self.run = batch._start(width, self.rows)
        # (compiling after the start is not timed)
        self.compile_seconds = self._before = self.run.compile_seconds
        self._start = time.perf_counter()
        self.state = self.run.start()
        self.holder: list[tuple[Any, Request] | None] = [None] * self.rows  # (entry, request)
        self.seen = np.zeros(self.rows, np.int64)  # per row: committed ids already read
        self.slot_steps = 0  # all row-steps so far
        self._calibrated = False

    @property
    def busy(self) -> int:
        """Slots holding a request."""
        return sum(h is not None for h in self.holder)

    @property
    def seconds(self) -> float:
        """Wall time since the start, compilation excluded."""
        return time.perf_counter() - self._start - (self.compile_seconds - self._before)

    def admit(self, waiting: collections.deque) -> list[int]:
        """Inserts requests from the front of ``waiting`` (``(entry, Request)`` pairs, popped)
        into the free slots, growing the slots first when one of them needs a larger bucket;
        returns the slots filled."""
        batch, b = self.batch, self.rows
        free = [i for i in range(b) if self.holder[i] is None]
        if not (waiting and free):
            return []
        # grown once to the widest of the prompts the free slots take: each width S takes
        # its own programs, so an admission does not pass through narrower ones
        need = max(batch._width(r) for _, r in itertools.islice(waiting, len(free)))
        if need > self.width:
            self.slot_steps += self.run.take_steps() * b
            self.run, self.state, seconds = batch._grow(self.run, self.state, need)
            self.compile_seconds, self._calibrated = self.compile_seconds + seconds, False
            self.width = need
        filled, taken = [], [waiting.popleft() for _ in range(min(len(waiting), len(free)))]
        for group in batch._groups(taken, self.width):
            here, free = free[: len(group)], free[len(group) :]
            self.state, seconds = batch._insert(self.run, self.width, self.state, group, here)
            self.compile_seconds += seconds
            for entry, slot in zip(group, here, strict=True):
                self.holder[slot] = entry
                self.seen[slot] = len(entry[1].prompt)
            filled += here
        return filled

    def resize(self, rows: int) -> dict[int, int]:
        """Moves the busy rows into ``rows`` slots (at least :attr:`busy`), so that a step costs
        the rows in use; returns each busy row's new slot by its old one. The rows decode on as
        if nothing happened (their state moves whole)."""
        busy = [i for i in range(self.rows) if self.holder[i] is not None]
        if rows < len(busy):
            raise ValueError(f"{len(busy)} busy rows do not fit {rows} slots")
        if rows == self.rows:
            return {i: i for i in busy}
        free = [i for i in range(self.rows) if self.holder[i] is None]
        take = busy + free[: rows - len(busy)] if rows < self.rows else list(range(self.rows))
        self.slot_steps += self.run.take_steps() * self.rows
        run = self.batch._start(self.width, rows)
        self.state = move_rows(self.state, run.start(), np.asarray(take, np.int32))
        self.compile_seconds += run.compile_seconds
        moved = {old: new for new, old in enumerate(take) if self.holder[old] is not None}
        holder, seen = [None] * rows, np.zeros(rows, np.int64)
        for old, new in moved.items():
            holder[new], seen[new] = self.holder[old], self.seen[old]
        self.run, self.rows, self.holder, self.seen = run, rows, holder, seen
        self._calibrated = False
        return moved

    def step(self, waiting: bool, steps: int | None = None) -> None:
        """Decodes one chunk: until ``refill`` more rows are done while requests are
        ``waiting``, else until all are, at most ``steps`` steps (default ``chunk``)."""
        if not self._calibrated:  # adaptive widths: costs measured once per program
            self.state, self._calibrated = self.run.calibrate(self.state), True
        b, busy = self.rows, self.busy
        until = b if not waiting else min(b, b - busy + self.batch.refill)
        steps = self.batch.chunk if steps is None else steps
        self.state = self.run.decode(self.state, steps, until_done=until)

    def new_tokens(self) -> dict[int, list[int]]:
        """Each busy slot's ids committed since the last call (checked first: no garbage is
        read), by slot; the tokens are read only when some row moved."""
        lengths, stats = jax.device_get((self.state.lengths, self.state.stats))
        busy = [i for i in range(self.rows) if self.holder[i] is not None]
        check_target(stats, busy)
        moved = [i for i in busy if lengths[i] > self.seen[i]]
        if not moved:
            return {}
        tokens = jax.device_get(self.state.tokens)
        new = {i: tokens[i, self.seen[i] : lengths[i]].tolist() for i in moved}
        self.seen[moved] = lengths[moved]
        return new

    def harvest(self) -> list[tuple[Any, Completion, FinishedRows, int]]:
        """The finished rows, freed: ``(entry, completion, counters, j)`` each (``counters``:
        the finished rows read off the device, row ``j`` of them this one)."""
        done = jax.device_get(self.state.done)
        self.slot_steps += self.run.take_steps() * self.rows
        finished = [i for i in range(self.rows) if self.holder[i] is not None and done[i]]
        if not finished:
            return []
        counters = finished_rows(self.state, finished)
        check_target(counters.stats)  # a broken target ends the run, no garbage out
        out = []
        stats, stop_tokens = counters.stats, self.batch.config.stop_tokens
        for j, slot in enumerate(finished):
            (index, request), self.holder[slot] = self.holder[slot], None
            ids = counters.generated(j)
            stopped = bool(ids) and ids[-1] in stop_tokens
            completion = Completion(
                request.id,
                index,
                ids,
                "stop" if stopped else "length",
                len(request.prompt),
                int(stats.steps[j]),
                int(stats.accepted[j]),
                int(stats.proposed[j]),
            )
            out.append(((index, request), completion, counters, j))
        return out

    def end(self, slot: int) -> None:
        """Frees ``slot`` at once (its request was cancelled): the row is marked done, so it
        no longer counts as running."""
        self.holder[slot] = None
        self.state = end_row(self.state, np.int32(slot))


def _length(prompt) -> int:
    try:
        return len(prompt)
    except TypeError:
        return 0


def _hashable(x):
    """A request id as a set member (lists and dicts by their JSON-like repr)."""
    try:
        hash(x)
        return (type(x).__name__, x)
    except TypeError:
        return (type(x).__name__, repr(x))
