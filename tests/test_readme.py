"""The README's Python quickstart runs as written (with fewer new tokens)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart() -> str:
    """The README's code block that starts with the decode imports."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    found = [b for b in blocks if b.startswith("from specjax.decode import")]
    assert len(found) == 1, "the README should have one Python quickstart"
    return found[0]


def test_readme_quickstart_runs(monkeypatch):
    code = quickstart()
    assert "max_new_tokens=200" in code
    code = code.replace("max_new_tokens=200", "max_new_tokens=12")
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    text = out.getvalue()
    assert "block efficiency" in text.lower() or "tokens/s" in text, text
    assert len(text.strip()) > 40
