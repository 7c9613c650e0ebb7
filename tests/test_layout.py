"""The code's layout rules: no module, script or test reaches into another module's private
(underscore) names; each module's public seams are what others use."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OURS = ("specjax", "tests", "scripts", "benchlib")


def python_files():
    for folder in ("specjax", "scripts", "tests"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def private_reach_ins(path: Path) -> list[str]:
    """``from m import _x`` and ``m._x`` for our own modules ``m`` (stdlib and third-party
    private names, e.g. ``os._exit``, are not this rule's business)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    ours: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(OURS):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.name}:{node.lineno} {node.module}.{alias.name}")
                ours.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(OURS):
                    ours.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ours
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_no_private_names_used_across_modules():
    found = [hit for path in python_files() for hit in private_reach_ins(path)]
    assert not found, "private names used from another module:\n" + "\n".join(found)


def test_the_rule_sees_a_reach_in(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from specjax.decode.loop import _Run\nfrom specjax import sampling as s\ns._x(1)\n"
    )
    assert len(private_reach_ins(bad)) == 2


def test_the_glossary_table_and_dimensions_agree():
    """``specjax.typing``'s docstring table and ``DIMENSIONS`` list the same letters."""
    import re

    from specjax import typing as glossary

    table = glossary.__doc__.split("=====  ")[2]  # the rows between the header rules
    letters = set(re.findall(r"^([A-Z])\s{2,}", table, flags=re.M))
    letters |= {"G"}  # written on H's row: "H ... ;  G: ..."
    assert letters == set(glossary.DIMENSIONS), letters ^ set(glossary.DIMENSIONS)


def imported_modules(path: Path) -> set[str]:
    """The modules ``path`` imports (absolute names; relative imports are not used here)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_no_library_module_imports_the_cli():
    """The library layers never import ``specjax.cli`` (the applications); a package's
    ``__main__`` is an application and may."""
    reach_ins = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "specjax").rglob("*.py"))
        if "cli" not in path.relative_to(ROOT / "specjax").parts
        and path.name != "__main__.py"
        and any(m == "specjax.cli" or m.startswith("specjax.cli.") for m in imported_modules(path))
    ]
    assert not reach_ins, f"library modules importing specjax.cli: {reach_ins}"


def test_importing_the_library_loads_no_jax_early_and_installs_no_signal_handler():
    """``import specjax.decode`` (what ``python -m specjax.decode`` does before its ``__main__``)
    imports no JAX; importing every public package changes no signal handler."""
    import subprocess
    import sys

    code = (
        "import signal, sys\n"
        "before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]\n"
        "import specjax.decode\n"
        "assert 'jax' not in sys.modules, 'specjax.decode imported jax'\n"
        "import specjax.decode.loop, specjax.drafters, specjax.verify, specjax.models\n"
        "from specjax.decode import generate, Stream, ContinuousBatch\n"
        "after = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]\n"
        "assert before == after, (before, after)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_import_graph_has_no_cycle_between_packages():
    """Package-level import graph of ``specjax`` (``specjax.<package>`` -> the packages its
    modules import at module level) is acyclic, so layers point one way."""
    import graphlib

    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "specjax").rglob("*.py")):
        parts = path.relative_to(ROOT / "specjax").parts
        if path.name == "__main__.py":
            continue
        here = parts[0].removesuffix(".py")
        deps = graph.setdefault(here, set())
        for name in imported_modules(path):
            bits = name.split(".")
            if bits[0] == "specjax" and len(bits) > 1 and bits[1] != here:
                there = ROOT / "specjax" / bits[1]
                if there.is_dir() or there.with_suffix(".py").exists():
                    deps.add(bits[1])
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        raise AssertionError(f"import cycle between specjax packages: {err.args[1]}") from err
    assert "cli" in order
