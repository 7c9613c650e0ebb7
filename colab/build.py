r"""Builds the Colab notebooks ``colab/NN_name.ipynb`` from their sources ``colab/src/NN_name.py``.

A source is plain Python in the "percent" format: ``# %%`` starts a code cell, ``# %% [markdown]``
a Markdown cell whose lines are comments (``# `` stripped). Every notebook gets the same two
cells first: the "Open in Colab" badge and the set-up cell (on Colab: clone and install
specjax; in a checkout: move to the repository root). The GitHub repository is named here
once (``REPO``): the badge and the set-up cell both take it from here.

    python colab/build.py                       # build and run every notebook (cwd: repo root)
    python colab/build.py 01_quickstart         # one of them
    python colab/build.py --no-execute          # cells only (outputs kept if no cell changed)

Executed notebooks are written with their outputs (so they render on GitHub) and without
volatile metadata (timings, kernel versions); cell ids are the cell's index. Needs the
``notebooks`` extra (``pip install -e ".[notebooks]"``).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import nbformat

COLAB = Path(__file__).resolve().parent
ROOT = COLAB.parent
SOURCES = COLAB / "src"

REPO = "specjax/specjax"
"""The GitHub repository (owner/name) the badge and the set-up cell point at."""

KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}

BADGE = (
    "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
    "(https://colab.research.google.com/github/{repo}/blob/main/colab/{name}.ipynb)"
)

SETUP = """\
# Set-up. On Colab: clone specjax and install it (a minute or two). In a checkout (jupyter, or
# the tests): only move to the repository root, where checkpoints/ and configs/ are.
import os
import subprocess
import sys
from pathlib import Path

REPO_URL = "https://github.com/{repo}"
if "google.colab" in sys.modules:
    if not Path("checkpoints/shakespeare").is_dir():  # not inside the clone yet
        if not Path("{name}").is_dir():
            subprocess.run(["git", "clone", "--depth", "1", REPO_URL], check=True)
        os.chdir("{name}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "."], check=True)
    sys.path.insert(0, os.getcwd())  # this kernel started before the install
    print("specjax installed from", os.getcwd())
elif not Path("checkpoints/shakespeare").is_dir() and Path("../checkpoints/shakespeare").is_dir():
    os.chdir("..")  # the kernel started in colab/"""


def names() -> list[str]:
    """The notebooks, in order (``01_quickstart``, ...)."""
    return sorted(p.stem for p in SOURCES.glob("[0-9][0-9]_*.py"))


def badge(name: str) -> str:
    """The "Open in Colab" badge (Markdown) of notebook ``name``."""
    return BADGE.format(repo=REPO, name=name)


def setup_source() -> str:
    """The first code cell of every notebook."""
    return SETUP.format(repo=REPO, name=REPO.split("/")[1])


def parse(text: str) -> list[tuple[str, str]]:
    """``[(kind, source)]`` of a percent-format source; kind is ``code`` or ``markdown``."""
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# %%"):
            cells.append(("markdown" if "[markdown]" in line else "code", []))
        elif cells:
            cells[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"text before the first '# %%' marker: {line!r}")
    out = []
    for kind, lines in cells:
        if kind == "markdown":
            lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in lines]
        source = "\n".join(lines).strip("\n")
        if source:
            out.append((kind, source))
    return out


def notebook(name: str) -> nbformat.NotebookNode:
    """Notebook ``name`` built from its source, without outputs."""
    cells = [nbformat.v4.new_markdown_cell(badge(name)), nbformat.v4.new_code_cell(setup_source())]
    for kind, source in parse((SOURCES / f"{name}.py").read_text(encoding="utf-8")):
        new = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        cells.append(new(source))
    nb = nbformat.v4.new_notebook(cells=cells)
    return clean(nb)


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drops volatile metadata: per-cell metadata and timings, kernel versions; numbers ids."""
    nb.metadata = {"kernelspec": dict(KERNEL), "language_info": {"name": "python"}}
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
        cell.metadata = {}
    nbformat.validate(nb)
    return nb


def execute(nb: nbformat.NotebookNode, timeout: int = 600) -> nbformat.NotebookNode:
    """A copy of ``nb`` run top to bottom in a fresh ``python3`` kernel with the repository root
    as its working directory; raises ``nbclient.exceptions.CellExecutionError`` on a failing
    cell."""
    import nbclient  # (only executing needs it)

    nb = copy.deepcopy(nb)
    client = nbclient.NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}},
        record_timing=False,
    )
    client.execute()
    return nb


def keep_outputs(nb: nbformat.NotebookNode, path: Path) -> nbformat.NotebookNode:
    """``nb`` with the outputs of the notebook at ``path`` when every cell is unchanged."""
    if not path.is_file():
        return nb
    old = nbformat.read(path, as_version=4)
    cells = lambda n: [(c.cell_type, c.source) for c in n.cells]
    if cells(old) == cells(nb):
        for new, kept in zip(nb.cells, old.cells, strict=True):
            if new.cell_type == "code":
                new.outputs, new.execution_count = kept.outputs, kept.execution_count
    return nb


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebooks to build (default: all)")
    parser.add_argument(
        "--no-execute", action="store_true", help="write the cells without running them"
    )
    args = parser.parse_args(argv)
    for name in args.names or names():
        nb, path = notebook(name), COLAB / f"{name}.ipynb"
        if args.no_execute:
            nb = keep_outputs(nb, path)
        else:
            start = time.perf_counter()
            nb = clean(execute(nb))
            print(f"{name}: executed in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        nbformat.write(nb, path)
        print(f"wrote colab/{name}.ipynb", file=sys.stderr)


if __name__ == "__main__":
    main()
