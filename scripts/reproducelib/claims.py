"""A claim row (paper, claim, specjax's measurement, verdict) and the claim table."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

HOLDS = "holds"
FAILS = "does not hold"
PARTLY = "partly"
NOT_MEASURED = "not measured here"


@dataclasses.dataclass(frozen=True)
class Claim:
    """One row of the claim table.

    Attributes:
      paper: who claims it (short citation).
      claim: what the paper says, in a few words.
      measured: specjax's measurement, in a few words and numbers.
      verdict: :data:`HOLDS`, :data:`FAILS`, :data:`PARTLY` or :data:`NOT_MEASURED`.
      section: the number of the report's section with the details.
    """

    paper: str
    claim: str
    measured: str
    verdict: str
    section: int

    def __post_init__(self):
        if self.verdict not in (HOLDS, FAILS, PARTLY, NOT_MEASURED):
            raise ValueError(f"unknown verdict {self.verdict!r}")


@dataclasses.dataclass
class Section:
    """One claim group's part of the report: its claim rows, its Markdown and its plots.

    Attributes:
      number: the section number (claims link to it).
      title: the heading.
      claims: the claim rows it measured.
      body: the Markdown under the heading.
      data: what its plot draws (:mod:`reproducelib.plots`).
      seconds: how long it took.
    """

    number: int
    title: str
    claims: list[Claim]
    body: str
    data: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def markdown(self) -> str:
        """The heading (with its anchor) and the body."""
        return (
            f'<a id="{anchor(self.number)}"></a>\n\n## {self.number}. {self.title}\n\n{self.body}'
        )


def anchor(number: int) -> str:
    """The Markdown anchor of section ``number``."""
    return f"section-{number}"


def verdict(ok: bool) -> str:
    """:data:`HOLDS` or :data:`FAILS`."""
    return HOLDS if ok else FAILS


def verdict_of(flags: list[bool]) -> str:
    """:data:`HOLDS` if every flag is true, :data:`FAILS` if none is, else :data:`PARTLY`."""
    if all(flags):
        return HOLDS
    return FAILS if not any(flags) else PARTLY


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def claim_row(index: int, claim: Claim) -> str:
    """One Markdown row: ``| # | paper | claim | measured | **verdict** | details |``."""
    mark = f"**{claim.verdict}**"
    link = f"[§{claim.section}](#{anchor(claim.section)})"
    cells = [str(index), claim.paper, claim.claim, claim.measured, mark, link]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def claim_table(claims: list[Claim]) -> str:
    """The claim table, a row per claim in order."""
    head = "| # | paper | claim | specjax measured | verdict | details |\n|---|---|---|---|---|---|"
    return "\n".join([head, *(claim_row(i, c) for i, c in enumerate(claims, 1))])


def tally(claims: list[Claim]) -> str:
    """``"12 claims: 9 hold, 2 do not hold, 1 partly"``."""
    plural = {HOLDS: "hold", FAILS: "do not hold", PARTLY: "partly", NOT_MEASURED: NOT_MEASURED}
    counts = {v: sum(c.verdict == v for c in claims) for v in plural}
    parts = [f"{n} {v if n == 1 else plural[v]}" for v, n in counts.items() if n]
    return f"{len(claims)} claim{'' if len(claims) == 1 else 's'}: " + ", ".join(parts)


# ----------------------------------------------------------------------------- numbers


def as_fraction(x: float, max_denominator: int = 10_000) -> Fraction:
    """The simplest fraction within float rounding of ``x``."""
    return Fraction(x).limit_denominator(max_denominator)


def over(x: float, denominator: int) -> str:
    """``x`` as a fraction over ``denominator`` (``"12/9"``), unreduced."""
    return f"{round(x * denominator)}/{denominator}"


def exact(x: float, expected: Fraction, denominator: int | None = None) -> str:
    """``"11/9 = 1.222222 (|error| 2.2e-16)"``: ``x`` against its expected fraction (written
    over ``denominator`` when given)."""
    name = over(float(expected), denominator) if denominator else str(expected)
    return f"{name} = {float(expected):.6f} (|error| {abs(x - float(expected)):.1e})"


def mean_se(mean: float, se: float, digits: int = 3) -> str:
    """``"2.345 ± 0.012"``."""
    return f"{mean:.{digits}f} ± {se:.{digits}f}"
