"""The report of ``bench_accelerator.py``: sections of items under a time budget, each item's
error recorded, Markdown and JSON rewritten atomically after every item."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import benchlib
from benchlib.accelerator import figures
from benchlib.accelerator.sizes import SECTIONS
from specjax.files import atomic_write, write_json

# ----------------------------------------------------------------------------- the report


def log(msg: str) -> None:
    """A progress line on stderr with the seconds since the process started."""
    elapsed = time.perf_counter() - _START
    print(f"[bench_accelerator +{elapsed:6.1f} s] {msg}", file=sys.stderr, flush=True)


_START = time.perf_counter()


def _clean(x):
    """``x`` made strict JSON: NaN and infinities become None, NumPy scalars Python numbers."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@dataclasses.dataclass
class Column:
    """One Markdown column: the row key, its header and its format spec."""

    key: str
    header: str
    spec: str = ""

    def cell(self, row: dict) -> str:
        value = row.get(self.key)
        if value is None:
            return "—"
        if isinstance(value, bool):
            return "yes" if value else "**NO**"
        return format(value, self.spec) if self.spec else str(value)


class Section:
    """One section's rows, notes and errors, timed against its budget."""

    def __init__(self, report: Report, name: str, budget_s: float):
        self.report, self.name, self.budget_s = report, name, budget_s
        self.start = time.perf_counter()
        self.data: dict[str, Any] = {
            "title": SECTIONS[name],
            "status": "running",
            "budget_s": budget_s,
            "seconds": 0.0,
            "notes": [],
            "errors": [],
            "rows": [],
        }
        self.columns: list[Column] = []

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def note(self, text: str) -> None:
        self.data["notes"].append(text)
        log(f"{self.name}: {text}")

    def row(self, **row) -> dict:
        """Appends a row (a dict; the Markdown table shows :attr:`columns`) and saves."""
        self.data["rows"].append(row)
        self.report.save()
        return row

    def item(self, label: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, or None when the budget is spent (a note) or it raised (an error)."""
        if self.elapsed > self.budget_s:
            self.note(f"skipped {label}: the section's {self.budget_s:.0f} s budget is spent")
            self.data["status"] = "partial"
            return None
        log(f"{self.name}: {label}")
        try:
            return fn()
        except Exception as err:  # a GPU run is precious: record it, go on
            self.error(err, label)
            return None
        finally:
            self.data["seconds"] = round(self.elapsed, 2)
            self.report.save()

    def figure(self, key: str, value: float | int | None, reason: str | None = None) -> None:
        """Sets key figure ``key`` (:data:`~benchlib.accelerator.figures.FIGURES`), or, with
        ``value`` None, says why it is null."""
        self.report.figure(key, value, reason)

    def error(self, err: BaseException, label: str | None = None) -> None:
        self.data["errors"].append(
            {
                "item": label,
                "type": type(err).__name__,
                "message": str(err)[:2000],
                "traceback": traceback.format_exc()[-4000:],
            }
        )
        log(f"{self.name}: {label or 'section'} failed: {type(err).__name__}: {str(err)[:500]}")

    def markdown(self) -> str:
        d = self.data
        out = [f"## {d['title']}", ""]
        out += [f"*{d['status']}: {d['seconds']:.0f} s of a {d['budget_s']:.0f} s budget.*", ""]
        if d["rows"] and self.columns:
            body = [[c.cell(r) for c in self.columns] for r in d["rows"]]
            out += [benchlib.table([c.header for c in self.columns], body), ""]
        out += [f"- {n}" for n in d["notes"]]
        out += [f"- **error** in {e['item']}: `{e['type']}: {e['message']}`" for e in d["errors"]]
        return "\n".join(out).rstrip() + "\n"


class Report:
    """The Markdown and JSON files, rewritten (atomically) on every :meth:`save`."""

    def __init__(self, md_path: Path, json_path: Path, meta: dict[str, Any]):
        self.md_path, self.json_path, self.meta = md_path, json_path, meta
        self.sections: dict[str, Section] = {}
        self.figures: dict[str, Any] = figures.initial()

    def figure(self, key: str, value: float | int | None, reason: str | None = None) -> None:
        """See :meth:`Section.figure`."""
        if key not in figures.FIGURES:
            raise KeyError(f"{key!r} is not a key figure: add it to figures.FIGURES")
        self.figures[key] = value
        if value is None:
            self.figures[f"{key}_reason"] = reason or "not measured"
        else:
            self.figures.pop(f"{key}_reason", None)

    def section(self, name: str, budget_s: float) -> Section:
        self.sections[name] = Section(self, name, budget_s)
        self.save()
        return self.sections[name]

    def run(self, name: str, budget_s: float, fn: Callable[[Section], None]) -> None:
        """Runs section ``name`` (``fn(section)``), recording an error that escapes it."""
        section = self.section(name, budget_s)
        log(f"=== {name} (budget {budget_s:.0f} s)")
        try:
            fn(section)
        except Exception as err:
            section.error(err)
        d = section.data
        d["seconds"] = round(section.elapsed, 2)
        d["status"] = "error" if d["errors"] else d["status"].replace("running", "ok")
        for key, (owner, _, _) in figures.FIGURES.items():
            if owner == name and self.figures.get(f"{key}_reason") == figures.not_run(name):
                self.figures[f"{key}_reason"] = (
                    f"the {name} section ({d['status']}) did not measure it: see its notes "
                    "and errors"
                )
        self.save()
        log(f"=== {name}: {d['status']} in {d['seconds']:.1f} s")

    def finish(self) -> None:
        """Marks the run complete and saves."""
        self.meta["finished"] = True
        self.save()

    def save(self) -> None:
        meta = self.meta | {"seconds": round(time.perf_counter() - _START, 1)}
        sections = {k: s.data for k, s in self.sections.items()}
        write_json(self.json_path, _clean({**meta, **self.figures, "sections": sections}))
        atomic_write(self.md_path, self.markdown(meta))

    def markdown(self, meta: dict[str, Any]) -> str:
        head = [
            f"# Accelerator benchmark ({meta['platform']}{', quick' if meta['quick'] else ''})",
            "",
            f"`{meta['command']}` on {meta['device']}, {meta['date']}; "
            f"{meta['seconds']:.0f} s {'in all' if meta.get('finished') else 'so far'}. "
            "Times are medians after warm-up; compile time is excluded.",
            "",
        ]
        if meta["quick"]:
            head += [
                "*--quick: tiny random stand-ins of every model and tiny sizes, on "
                f"{meta['platform']}; the numbers check that the code runs, nothing more.*",
                "",
            ]
        body = [self.figures_markdown()] + [s.markdown() for s in self.sections.values()]
        return "\n".join(head) + "\n" + "\n".join(body)

    def summary(self) -> str:
        """What a run prints last: the key figures, then the ops section's table if it ran."""
        lines = ["Key figures:"]
        for key, (_, _, spec) in figures.FIGURES.items():
            value = self.figures.get(key)
            reason = self.figures.get(f"{key}_reason")
            shown = format(value, spec) if value is not None else f"null ({reason})"
            lines.append(f"  {key}: {shown}")
        ops = self.sections.get("ops")
        if ops is not None:
            lines += ["", ops.markdown()]
        return "\n".join(lines)

    def figures_markdown(self) -> str:
        """The key figures as a table (a null one with its reason)."""
        rows = []
        for key, (_, what, spec) in figures.FIGURES.items():
            value = self.figures.get(key)
            shown = format(value, spec) if value is not None else "—"
            reason = "" if value is not None else self.figures.get(f"{key}_reason", "")
            rows.append([f"`{key}`", what, shown, reason])
        table = benchlib.table(["key", "what", "value", "why null"], rows, left=4)
        return f"## Key figures\n\n{table}\n"
