"""The repository explains itself: code, tests, scripts and docs cite ``docs/*.md``, never design
notes kept outside the repository, and every page the README and the docs index link exists.

Pure text checks (no JAX, well under a second)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()

SCANNED_DIRS = ("specjax", "scripts", "tests", "docs")
SCANNED_FILES = ("README.md", "CONTRIBUTING.md")
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".cfg", ".yaml", ".yml", ".sh"}

# The names of the notes that used to live outside the repository, written so that this file
# does not match itself (it is skipped anyway).
OUTSIDE_NOTES = ("ALGORITHMS", "DESIGN", "SSD", "DRAFTS", "ENGINE")
OUTSIDE = [
    re.compile(r"\b(?:" + "|".join(OUTSIDE_NOTES) + r")\.md\b"),  # case-sensitive: docs/ssd.md
    re.compile(r"\bALGORITHMS\s*§"),  # "ALGORITHMS §3" without the suffix
    re.compile(r"\.\./" + "shared"),
    re.compile(r"/work/" + "shared"),
    re.compile("shared " + "folder", re.IGNORECASE),
    re.compile("design " + r"notes?\b", re.IGNORECASE),
]

LINK = re.compile(r"\]\(([^)\s#]+\.md)(?:#[^)\s]*)?\)")


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED_FILES if (ROOT / name).exists()]
    for folder in SCANNED_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in TEXT_SUFFIXES and path.is_file() and path.resolve() != THIS:
                if "__pycache__" not in path.parts:
                    files.append(path)
    return files


def outside_citations(text: str) -> list[str]:
    """The lines of ``text`` that cite notes outside the repository, as ``line: text``."""
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        if any(pattern.search(line) for pattern in OUTSIDE):
            hits.append(f"{number}: {line.strip()}")
    return hits


def test_no_citation_points_outside_the_repository():
    found = []
    for path in scanned_files():
        for hit in outside_citations(path.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{path.relative_to(ROOT)}:{hit}")
    assert not found, "cite docs/*.md instead of notes outside the repository:\n" + "\n".join(found)


def test_the_check_sees_outside_citations():
    bad = "see " + "ALGORITHMS" + ".md §3\n(" + "DESIGN" + ".md)\nALGORITHMS §0.4\n../shared/x"
    assert len(outside_citations(bad)) == 4
    assert not outside_citations("docs/ssd.md, docs/algorithms.md, block verification")


def linked_pages(markdown: Path) -> list[Path]:
    """The ``.md`` files ``markdown`` links to (relative links), resolved from its folder."""
    text = markdown.read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if "://" not in t]
    return [(markdown.parent / target).resolve() for target in targets]


def test_every_linked_page_exists():
    sources = [ROOT / "README.md", ROOT / "docs" / "README.md", ROOT / "CONTRIBUTING.md"]
    sources += sorted((ROOT / "docs").glob("*.md"))
    missing = [
        f"{source.relative_to(ROOT)} -> {target}"
        for source in sources
        for target in linked_pages(source)
        if not target.is_file()
    ]
    assert not missing, "broken links to pages:\n" + "\n".join(missing)


def test_readme_and_docs_index_link_every_page():
    pages = {path.resolve() for path in (ROOT / "docs").glob("*.md")} - {
        (ROOT / "docs" / "README.md").resolve()
    }
    index = set(linked_pages(ROOT / "docs" / "README.md"))
    readme = set(linked_pages(ROOT / "README.md"))
    assert pages <= index, sorted(str(p.name) for p in pages - index)
    assert pages <= readme, sorted(str(p.name) for p in pages - readme)
    assert (ROOT / "docs" / "README.md").resolve() in readme
