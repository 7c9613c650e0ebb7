"""Width policies in the benchmarks: ``--policies=`` of the width scripts, and where a run's
width costs came from.

``--policies``: :class:`~specjax.decode.widths.Goodput` variants named on the command line, e.g.
``default,margin=1.0,prior_weight=1,probe=4+probe_max=64``: each item is ``default``
(``Goodput()`` as shipped) or ``field=value`` pairs joined by ``+``, each overriding one field of
``Goodput()`` (``scripts/simulate_widths.py``, ``scripts/bench_widths.py``,
``scripts/pinned_widths.py``)."""

from __future__ import annotations

import dataclasses

from specjax.decode import costs as cost_source
from specjax.decode.seams import PROGRAMS
from specjax.decode.widths import Goodput

DEFAULT = "default"


def parse(item: str) -> Goodput:
    """The :class:`Goodput` an item names; raises ValueError naming the fields otherwise."""
    item = item.strip()
    if item == DEFAULT:
        return Goodput()
    fields = {f.name: f.type for f in dataclasses.fields(Goodput)}
    changes = {}
    for part in item.split("+"):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or name not in fields:
            raise ValueError(
                f"policy {item!r}: {part!r} is not field=value for a Goodput field "
                f"({', '.join(fields)}), nor {DEFAULT!r}"
            )
        kind = type(getattr(Goodput(), name))
        try:
            changes[name] = _bool(value) if kind is bool else kind(value)
        except ValueError as e:
            raise ValueError(
                f"policy {item!r}: {name} takes a {kind.__name__}, not {value!r}"
            ) from e
    return dataclasses.replace(Goodput(), **changes)


def _bool(value: str) -> bool:
    if value.strip().lower() not in ("true", "false", "1", "0"):
        raise ValueError(value)
    return value.strip().lower() in ("true", "1")


def parse_all(items: list[str]) -> dict[str, Goodput]:
    """``name -> policy`` in the order given (``default`` when none is)."""
    return {item.strip(): parse(item) for item in (items or [DEFAULT])}


def costs_of(run) -> tuple[str | None, list[float]]:
    """``(source, costs)`` of the width costs a :class:`~specjax.decode.seams.Run` weighs
    (:attr:`Run.costs`, :mod:`specjax.decode.costs`): ``given``; ``measured`` (once per
    program, where the output cannot depend on the widths: T = 0 or ``gumbel``); ``guessed``
    (where no clock may choose: T > 0 with another verifier); ``guessed (not measured yet)``
    (measurable, but no measurement finished); ``unused`` (a policy that reads none: random,
    fixed). ``(None, [])`` without widths."""
    config = run.config
    if not config.widths:
        return None, []
    costs = [round(float(c), 3) for c in run.costs]
    if not cost_source.reads_costs(config):
        return "unused", costs
    if config.width_costs:
        return "given", costs
    if cost_source.may_measure(config):
        return (
            "measured" if run.programs.key in PROGRAMS.costs else "guessed (not measured yet)"
        ), costs
    return "guessed", costs
