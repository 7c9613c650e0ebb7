"""The colab/ notebooks: built from their sources, public API only, and they run top to bottom.

Each run executes an in-memory copy of the committed notebook (never rewriting it) with nbclient
in a fresh ``python3`` kernel, cwd the repository root, and fails on any cell error. The default
tier checks the committed notebooks without running them (sources, public API, outputs); the
slow tier runs all five, the quickstart with checks of its own. nbclient, nbformat and
ipykernel come with the ``dev`` extra: a missing one fails this module instead of skipping it.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import time
from pathlib import Path

import nbclient  # noqa: F401 (the dev extra must provide it; import errors fail the module)
import nbformat
import pytest

from tests.test_layout import private_reach_ins

ROOT = Path(__file__).resolve().parents[1]
COLAB = ROOT / "colab"
NOTEBOOKS = ["01_quickstart", "02_verifiers", "03_real_weights", "04_sharded", "05_ssd"]
PROBE = "import sys\nprint('kernel prefix:', sys.prefix)"


def builder():
    """colab/build.py as a module."""
    spec = importlib.util.spec_from_file_location("colab_build", COLAB / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed(name: str) -> nbformat.NotebookNode:
    return nbformat.read(COLAB / f"{name}.ipynb", as_version=4)


def code_cells(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def run(name: str) -> tuple[nbformat.NotebookNode, float]:
    """Executes a copy of notebook ``name`` with a probe cell in front; returns it and the
    seconds it took (kernel start included)."""
    nb = committed(name)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PROBE))
    start = time.perf_counter()
    done = builder().execute(nb, timeout=600)
    seconds = time.perf_counter() - start
    probe = "".join(o.get("text", "") for o in done.cells[0].outputs)
    assert f"kernel prefix: {sys.prefix}" in probe, (
        f"the python3 kernel is not this interpreter ({sys.prefix}): {probe}"
    )
    return done, seconds


def text_of(nb) -> str:
    return "".join(
        o.get("text", "") + "".join(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )


def test_the_notebook_list_matches_the_sources():
    assert builder().names() == NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebooks_are_built_from_their_sources(name):
    """``python colab/build.py`` gives the committed cells (rebuild after editing a source)."""
    built, nb = builder().notebook(name), committed(name)
    assert [(c.cell_type, c.source) for c in nb.cells] == [
        (c.cell_type, c.source) for c in built.cells
    ], f"colab/{name}.ipynb is stale: run python colab/build.py {name}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebooks_open_with_a_badge_and_the_install_cell(name):
    b = builder()
    nb = committed(name)
    assert nb.cells[0].cell_type == "markdown"
    assert f"colab.research.google.com/github/{b.REPO}/blob/main/colab/{name}.ipynb" in (
        nb.cells[0].source
    )
    first_code = code_cells(nb)[0]
    assert '"google.colab" in sys.modules' in first_code
    assert f"https://github.com/{b.REPO}" in first_code and "pip" in first_code


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebooks_use_the_public_api_only(name, tmp_path):
    code = "\n\n".join(code_cells(committed(name)))
    ast.parse(code)  # (no cell magics: the cells are plain Python)
    path = tmp_path / f"{name}.py"
    path.write_text(code, encoding="utf-8")
    assert not private_reach_ins(path)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebooks_carry_outputs_without_errors(name):
    nb = committed(name)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert outputs, f"colab/{name}.ipynb was committed without outputs"
    assert not [o for o in outputs if o.output_type == "error"]
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code")


@pytest.mark.slow
def test_quickstart_runs():
    nb, seconds = run("01_quickstart")
    text = text_of(nb)
    assert "speedup vs autoregressive" in text
    assert "greedy speculative == greedy autoregressive: True" in text
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the acceptance plot is missing"
    assert seconds < 300, f"the quickstart took {seconds:.0f} s"


CHECKS = {
    "02_verifiers": ["direct target sample", "alpha*"],
    "03_real_weights": ["n-gram output == autoregressive output: True"],
    "04_sharded": [
        "greedy: sharded == single device: True",
        "T = 1, GBV, K = 3: sharded == single device: True",
    ],
    "05_ssd": ["SSD output == autoregressive output: True", "hit rate"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in NOTEBOOKS if n != "01_quickstart"])
def test_every_other_notebook_runs_in_under_five_minutes(name):
    nb, seconds = run(name)
    text = text_of(nb)
    for expected in CHECKS.get(name, []):
        assert expected in text, (name, expected)
    assert seconds < 300, f"{name} took {seconds:.0f} s"
