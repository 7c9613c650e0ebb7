"""Operations per decode step, read from a compiled program's optimised HLO text
(``compiled.as_text()``): what launches work on the device, and grep counts of the operations
that move bytes a step should not move (``concatenate``, ``transpose``, ``copy``)."""

from __future__ import annotations

import collections
import dataclasses
import re

FREE = frozenset(
    {
        "parameter",
        "constant",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "after-all",
        "add-dependency",
        "opt-barrier",
        "partition-id",
        "replica-id",
        "domain",
    }
)
"""Opcodes that launch nothing: arguments, literals, tuple plumbing, layout-free reshapes."""

KINDS = {
    "fusion": "fusion",
    "custom-call": "custom-call",
    "dot": "dot",
    "convolution": "dot",
    "copy": "copy",
    "copy-start": "copy",
    "sort": "sort",
    "while": "while",
    "conditional": "conditional",
}
"""Opcode -> the column it is counted in; every other launching opcode counts as ``other``."""

COLUMNS = ("fusion", "custom-call", "dot", "copy", "sort", "while", "conditional", "other")

_HEADER = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[^\s(]+)\s*\(.*\{\s*$")
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[^\s=]+)\s*=\s*(?P<shape>.+?)\s(?P<op>[a-z][a-z0-9_\-]*)\("
)
_CALLED = {
    "call": re.compile(r"to_apply=%?([^\s,}]+)"),
    "while": re.compile(r"body=%?([^\s,}]+)"),
    "conditional": re.compile(r"(?:branch_computations=\{([^}]*)\}|_computation=%?([^\s,}]+))"),
}
_CONDITION = re.compile(r"condition=%?([^\s,}]+)")


@dataclasses.dataclass
class Module:
    """An HLO module's computations: name -> instruction lines; ``entry``: the ENTRY's name."""

    computations: dict[str, list[str]]
    entry: str


def parse(text: str) -> Module:
    """The computations of ``compiled.as_text()`` (or any HLO module text)."""
    computations: dict[str, list[str]] = {}
    entry, current = "", None
    for line in text.splitlines():
        if current is None:
            match = _HEADER.match(line)
            if match:
                current = match["name"]
                computations[current] = []
                if line.startswith("ENTRY"):
                    entry = current
        elif line.startswith("}"):
            current = None
        else:
            computations[current].append(line)
    if not entry:
        raise ValueError("no ENTRY computation in the HLO text")
    return Module(computations, entry)


def _opcode(line: str) -> tuple[str, str] | None:
    match = _INSTRUCTION.match(line)
    return (match["op"], line) if match else None


def _called(op: str, line: str) -> list[str]:
    """Computations that instruction ``line`` (opcode ``op``) runs: a ``call``'s, a
    ``while``'s body (and condition), a ``conditional``'s branches."""
    pattern = _CALLED.get(op)
    if pattern is None:
        return []
    names = []
    for match in pattern.finditer(line):
        for group in match.groups():
            if group:
                names += [n.strip().lstrip("%") for n in group.split(",") if n.strip()]
    if op == "while":
        names += _CONDITION.findall(line)
    return names


def count_ops(text: str | Module, computation: str | None = None) -> dict[str, int]:
    """Device-launching operations of one computation of a compiled HLO module.

    Counts every instruction of ``computation`` (default: the ENTRY) whose opcode is not in
    :data:`FREE` (arguments, constants, tuple plumbing, bitcasts), by column of :data:`KINDS`:
    ``fusion`` (one kernel each on GPU), ``custom-call`` (cuBLAS/cuDNN/Triton calls, on CPU
    oneDNN/YNN), ``dot`` (unfused dot and convolution), ``copy`` (copy, copy-start), ``sort``,
    ``while``, ``conditional``, and ``other`` (any other unfused operation: reduce, scatter,
    dynamic-update-slice, ...). A ``call`` (XLA:GPU outlines a command buffer, a CUDA graph,
    into one) is not counted itself: the instructions of the computation it calls are
    (recursively). Nothing inside a fusion's computation is counted: a fusion is one
    operation. A ``while`` or ``conditional`` counts once, as one operation of the
    computation; what runs inside them is counted apart, in ``in_loops``: the operations of
    each ``while``'s body and condition for ONE iteration, and of every ``conditional``'s
    largest branch (recursively, each the same way). ``total`` is the sum of the columns,
    i.e. the operations this computation launches itself, once.

    Returns:
      ``{column: count for COLUMNS} | {"total": ..., "in_loops": ...}``.
    """
    module = text if isinstance(text, Module) else parse(text)
    counts = collections.Counter({c: 0 for c in COLUMNS})
    in_loops = 0

    def walk(name: str) -> None:  # (HLO's call graph has no cycles)
        nonlocal in_loops
        for op, line in filter(None, map(_opcode, module.computations[name])):
            if op in FREE:
                continue
            called = [c for c in _called(op, line) if c in module.computations]
            if op == "call":
                for c in called:
                    walk(c)
                continue
            counts[KINDS.get(op, "other")] += 1
            if op == "while":
                in_loops += sum(_launched(module, c) for c in called)
            elif op == "conditional" and called:
                in_loops += max(_launched(module, c) for c in called)

    walk(computation or module.entry)
    out = {c: counts[c] for c in COLUMNS}
    return out | {"total": sum(out.values()), "in_loops": in_loops}


def _launched(module: Module, name: str) -> int:
    """Operations one run of computation ``name`` launches, nested loops' once-through
    contents included (:func:`count_ops`'s ``total + in_loops``)."""
    counts = count_ops(module, name)
    return counts["total"] + counts["in_loops"]


def loop_body(text: str | Module) -> str:
    """The body of the ENTRY's outermost ``while`` with the most operations (looking through
    ``call``s: XLA:GPU may move a loop into a command buffer's computation): a decode
    program's step (the program is prefill's state in, ``lax.while_loop`` over steps)."""
    module = text if isinstance(text, Module) else parse(text)
    bodies = []

    def scan(name: str) -> None:
        for op, line in filter(None, map(_opcode, module.computations[name])):
            if op == "call":
                for called in _called(op, line):
                    if called in module.computations:
                        scan(called)
            elif op == "while":
                body = _CALLED["while"].search(line)
                if body and body.group(1) in module.computations:
                    bodies.append(body.group(1))

    scan(module.entry)
    if not bodies:
        raise ValueError("the ENTRY computation has no while loop")
    return max(bodies, key=lambda b: count_ops(module, b)["total"])


def step_ops(text: str) -> dict[str, int]:
    """:func:`count_ops` of a decode program's step (:func:`loop_body`)."""
    module = parse(text)
    return count_ops(module, loop_body(module))


GREPPED = ("concatenate", "transpose", "copy")
"""Opcodes :func:`grep_ops` counts: each may move a weight's or a cache's bytes again."""


def grep_ops(text: str) -> dict[str, int]:
    """How often each opcode of :data:`GREPPED` occurs anywhere in the module text (fusion
    computations included: e.g. a DotMerger ``concatenate`` of weights inside a fusion)."""
    return {op: len(re.findall(rf"\s{op}\(", text)) for op in GREPPED}
