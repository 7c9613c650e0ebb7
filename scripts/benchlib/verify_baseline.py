"""``bench_verify.py --baseline=<commit>``: the verifiers of another commit, imported beside the
working tree's, so that old and new are timed in one process on the same arrays."""

from __future__ import annotations

import importlib
import pathlib
import re
import subprocess
import sys
import tempfile
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = "specjax/verify"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def import_verifiers(commit: str) -> ModuleType:
    """``specjax.verify`` as it was at ``commit`` (``git show``), imported as the package
    ``verify_<sha>`` from a temporary folder; the rest of ``specjax`` is the working tree's.

    Raises:
      subprocess.CalledProcessError: ``commit`` is not a commit of this repository.
    """
    sha = _git("rev-parse", "--short=9", f"{commit}^{{commit}}").strip()
    name = f"verify_{sha}"
    if name in sys.modules:
        return sys.modules[name]
    folder = pathlib.Path(tempfile.mkdtemp(prefix="specjax_baseline_"))
    for path in _git("ls-tree", "-r", "--name-only", sha, PACKAGE).split():
        if not path.endswith(".py"):
            continue
        text = _git("show", f"{sha}:{path}")
        # Absolute imports of the package (the only form it uses) point at the copy.
        text = re.sub(r"\bspecjax\.verify\b", name, text)
        text = text.replace("from specjax import verify", f"import {name} as verify")
        target = folder / name / pathlib.Path(path).relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    sys.path.insert(0, str(folder))
    return importlib.import_module(name)
