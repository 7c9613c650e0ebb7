"""The decode CLI's files: one JSON record per prompt out (appended as each prompt finishes,
resumable), progress on stderr, and the whole-run outputs (the prompts in:
:mod:`specjax.cli.job_input`).

* ``results``: JSONL, one record per prompt (``id``, ``text``, ``token_ids``, ``finish_reason``,
  the counts), appended and flushed as soon as the prompt finishes, fsynced at least every
  :data:`FSYNC_SECONDS`; written by process 0 only.
* ``output`` (the texts, one per line) and ``metrics_json``: written once at the end, atomically
  (:func:`write_outputs`).
* ``resume``: ids with a finished record in ``results`` are skipped (an ``error`` record's prompt
  runs again); a torn last line (a run killed while writing it) is cut off first. Without
  ``resume`` a non-empty ``results`` is refused.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from specjax.files import atomic_write

FSYNC_SECONDS = 2.0
"""Longest time between two fsyncs of ``results`` while records are appended."""


class ResultsFile:
    """``results``: append-only JSONL, one record per finished prompt.

    Args:
      path: the file.
      resume: keep the records already there (cutting a torn last line); else refuse a
        non-empty file.
      write: whether this process writes (process 0); the others only read.
    """

    def __init__(self, path: str | Path, resume: bool, write: bool = True):
        self.path = Path(path)
        self.write = write
        self.records: dict[str, dict] = {}  # by the id's JSON text
        self.torn = False
        self._file = None
        self._synced = time.monotonic()
        size = self.path.stat().st_size if self.path.exists() else 0
        if size and not resume:
            raise ValueError(
                f"results {self.path} already holds records; set resume=True to skip the "
                "prompts it has and append the rest, or give another path"
            )
        if size:
            self._read()

    def _read(self) -> None:
        data = self.path.read_bytes()
        cut = data.rfind(b"\n") + 1  # a last line without its newline was cut short
        self.torn = bool(data[cut:])
        for number, raw in enumerate(data[:cut].split(b"\n")[:-1], start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                record = None
            if not isinstance(record, dict) or "id" not in record:
                raise ValueError(
                    f"results {self.path} line {number} is not a record of this program; "
                    "give another results path"
                )
            self.records[json.dumps(record["id"], sort_keys=True)] = record
        if self.torn and self.write:  # its prompt runs again
            with self.path.open("r+b") as f:
                f.truncate(cut)
                f.flush()
                os.fsync(f.fileno())

    def has(self, rid) -> bool:
        """Whether a record of id ``rid`` is in the file."""
        return json.dumps(rid, sort_keys=True) in self.records

    def finished(self, rid) -> bool:
        """Whether id ``rid`` has a record that is not an ``error`` (an error's prompt runs
        again on resume: a fixed config may decode it; the last record of an id counts)."""
        return self.has(rid) and self.get(rid).get("finish_reason") != "error"

    def get(self, rid) -> dict:
        """The record of id ``rid``."""
        return self.records[json.dumps(rid, sort_keys=True)]

    def append(self, record: dict) -> None:
        """Appends one record (flushed; fsynced at least every :data:`FSYNC_SECONDS`)."""
        if not self.write:
            return
        try:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._file.flush()
            if time.monotonic() - self._synced >= FSYNC_SECONDS:
                os.fsync(self._file.fileno())
                self._synced = time.monotonic()
        except OSError as err:
            raise self._failed(err) from None

    def close(self) -> None:
        """Flushes and fsyncs what was appended."""
        if self._file is None:
            return
        file, self._file = self._file, None
        try:
            file.flush()
            os.fsync(file.fileno())
            file.close()
        except OSError as err:
            raise self._failed(err) from None

    def _failed(self, err: OSError) -> RuntimeError:
        return RuntimeError(
            f"results {self.path}: writing failed ({err.strerror or err}); the records before "
            "it are kept (a torn last line is cut on resume): fix the disk and rerun with "
            "resume=True"
        )


def record(completion, text: str) -> dict:
    """The ``results`` record of a :class:`~specjax.decode.batching.Completion`."""
    c = completion
    out = {
        "id": c.id,
        "text": text,
        "token_ids": c.token_ids,
        "finish_reason": c.finish_reason,
        "prompt_tokens": c.prompt_tokens,
        "generated_tokens": len(c.token_ids),
        "target_forwards": c.target_forwards,
        "accepted_draft_tokens": c.accepted_tokens,
        "proposed_draft_tokens": c.proposed_tokens,
    }
    if c.error:
        out["error"] = c.error
    return out


class ProgressLine:
    """Progress on stderr: prompts done / total, generated tokens/s, acceptance, ETA.

    On a terminal one line redrawn in place (at most every ``every`` seconds); elsewhere, when
    asked for (``progress="on"``), a line every ``quiet_every`` seconds.
    """

    def __init__(self, mode: str, stream=None, every: float = 0.5, quiet_every: float = 10.0):
        self.stream = sys.stderr if stream is None else stream
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.enabled = mode == "on" or (mode == "auto" and tty)
        self.tty = tty
        self.every = every if tty else quiet_every
        self._last = -math.inf
        self._drawn = False

    def __call__(self, progress, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < self.every):
            return
        self._last = now
        line = format_progress(progress)
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self._drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self, progress) -> None:
        """Draws the final counts and ends the line."""
        self(progress, force=True)
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def format_progress(p) -> str:
    """``[ 37/200] 512.3 tok/s | acceptance 0.62 | slots 94% | ETA 1m23s``."""
    width = len(str(p.total))
    parts = [f"[{p.finished:>{width}}/{p.total}]", f"{p.tokens_per_second:.1f} tok/s"]
    if not math.isnan(p.acceptance_rate):
        parts.append(f"acceptance {p.acceptance_rate:.2f}")
    if p.slot_steps:
        parts.append(f"slots {100 * p.utilization:.0f}%")
    if p.errors:
        parts.append(f"{p.errors} errors")
    parts.append(f"ETA {_duration(p.eta_seconds)}")
    return " | ".join(parts)


def _duration(seconds: float) -> str:
    if math.isnan(seconds) or math.isinf(seconds):
        return "?"
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def write_outputs(cfg, record: dict, completions: list[str], main: bool) -> None:
    """``output`` (the texts, one per line: newlines and backslashes escaped as ``\\n`` and
    ``\\\\``, so a row is a line) and ``metrics_json`` (``record``), each atomically, by
    process 0 (``main``). A write that fails (a full disk, an I/O error) does not stop the
    other; then one error names what was and was not written."""
    if not main:
        return
    files = []
    if cfg.output:
        files.append(("output", cfg.output, "".join(escape_line(c) + "\n" for c in completions)))
    if cfg.metrics_json:
        text = json.dumps(record, indent=1, default=_jsonable) + "\n"
        files.append(("metrics_json", cfg.metrics_json, text))
    failed, written = [], []
    for key, path, text in files:
        try:
            atomic_write(path, text)
            written.append(f"{key} {path}")
        except OSError as err:
            failed.append(f"{key} {path} could not be written ({err.strerror or err})")
    if failed:
        kept = f"; {' and '.join(written)} was written" if written else ""
        raise RuntimeError("; ".join(failed) + kept + "; free space or choose another path")


def escape_line(text: str) -> str:
    """``text`` on one line: backslashes doubled, newlines as ``\\n``, carriage returns as
    ``\\r`` (how ``output`` keeps one completion per line)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x)}")
