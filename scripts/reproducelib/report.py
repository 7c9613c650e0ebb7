"""REPRODUCTION.md: the header (command, machine, software, date), the claim table, then each
claim group's section with its plot."""

from __future__ import annotations

import datetime
import os
import subprocess

import benchlib

from reproducelib.claims import Section, claim_table, tally
from reproducelib.pairs import ROOT
from reproducelib.settings import Settings

RULES = """Verdicts: **holds** — the measurement agrees with the claim (exact values within
1e-6; orderings at every position; "never worse" = not below by more than 2 standard errors);
**does not hold** — it disagrees on our pairs, with the reason in the section; **partly** — it
holds for some of the cases measured and not others; **not measured here** — this machine cannot
measure it (said why). Every figure is produced by the command above; the sections say how."""


def git_revision() -> str:
    """``<short hash>`` of HEAD, ``+ local changes`` when the code differs from it (the
    outputs, REPRODUCTION.md and benchmarks/, do not count)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *OUTPUTS],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head}{' + local changes' if dirty else ''}" if head else "unknown"


OUTPUTS = (":!REPRODUCTION.md", ":!benchmarks")


def header(settings: Settings, seconds: float, load: tuple[float, float], revision: str) -> str:
    now = datetime.datetime.now(datetime.UTC)
    return (
        f"`{benchlib.command()}` on {benchlib.machine(verbose=True)}; {os.cpu_count()} "
        f"cores, no GPU; {now:%Y-%m-%d %H:%M} UTC; specjax {revision}; {settings.mode} "
        f"mode, {seconds:.0f} s in all; 1-minute load average {load[0]:.1f} at the start, "
        f"{load[1]:.1f} at the end (above {os.cpu_count()}: other jobs shared the CPUs)."
    )


def _timings(sections: list[Section]) -> str:
    return ", ".join(f"§{s.number} {s.seconds:.0f} s" for s in sections)


def assemble(
    sections: list[Section],
    settings: Settings,
    seconds: float,
    load: tuple[float, float],
    plots: dict[int, str],
    output: str | None,
    revision: str,
) -> str:
    """The whole report; plot links are relative to ``output``'s directory."""
    claims = [c for s in sections for c in s.claims]
    base = os.path.dirname(os.path.abspath(output)) if output else os.getcwd()
    parts = [
        "# Reproducing the papers' claims",
        header(settings, seconds, load, revision),
        "```bash\n" + benchlib.command() + "\n```",
        f"**{tally(claims)}.**",
        claim_table(claims),
        RULES,
        f"Time per section: {_timings(sections)} (compilation included).",
    ]
    for s in sections:
        text = s.markdown().rstrip()
        if s.number in plots:
            rel = os.path.relpath(plots[s.number], base)
            text += f"\n\n![{s.title}]({rel})"
        parts.append(text)
    return "\n\n".join(parts) + "\n"
