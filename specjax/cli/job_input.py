"""A batch job's prompts in: the ``input`` (or ``prompts_file``) file, parsed and encoded.

* JSONL, one object per line with ``"id"`` and either ``"prompt"`` (text) or ``"messages"`` (a
  chat); other keys are carried along unread, except per-prompt sampling keys (refused: the whole
  job shares one :class:`~specjax.decode.DecodeConfig`).
* Or a plain text file, one prompt per line (``\\n`` escapes allowed), its id the line number
  (from 1).

:func:`parse_input` reads the file without a tokenizer (the CLI's checks run it before any model
loads); :func:`read_input` encodes its prompts.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

PER_PROMPT_SAMPLING = ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop")
"""Keys a JSONL line may not set: the job decodes every prompt with the config's values."""


@dataclasses.dataclass(frozen=True)
class Item:
    """One line of the input.

    Attributes:
      id: its id; text: the text the model reads (chat template applied), or "" if bad.
      prompt: its token ids (None if bad); error: why it cannot run ("" if it can).
    """

    id: Any
    text: str
    prompt: list[int] | None
    error: str = ""


def input_key(cfg) -> str:
    """The config key that names a batch job's prompts: ``input``, else ``prompts_file``."""
    return "input" if cfg.input else "prompts_file"


def is_jsonl(path: Path) -> bool:
    """JSONL by suffix (``.jsonl``, ``.json``), else by a first non-empty line that is an object."""
    if path.suffix in (".jsonl", ".json"):
        return True
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                return line.lstrip().startswith("{")
    return False


@dataclasses.dataclass(frozen=True)
class Line:
    """One prompt of the input as written, before tokenizing: its ``id``, and its ``text`` or
    ``messages``, or the ``error`` that keeps it from running."""

    id: Any
    text: str | None = None
    messages: list | None = None
    error: str = ""


def parse_input(path: str | Path, key: str = "input") -> list[Line]:
    """The prompts of ``path`` (JSONL or one prompt per line), not yet tokenized; a problem
    with the file itself (not UTF-8, a line that is not JSON or has no usable id, sampling keys
    per prompt, no prompts, a repeated id) is one ``ValueError`` naming ``key`` and the line. A
    prompt that cannot run (no ``prompt`` or ``messages``, the wrong types) becomes a
    :class:`Line` with its ``error``: the job reports it and goes on. Cheap: the CLI's checks
    read the file with it before loading any model."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{key} {path} is not UTF-8 text ({err.reason}); give a text file"
        ) from None
    out: list[Line] = []
    jsonl = is_jsonl(path)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if jsonl:
            out.append(_jsonl_line(f"{key} {path} line {number}", line))
        else:
            out.append(Line(number, text=line.replace("\\n", "\n")))
    if not out:
        raise ValueError(f"{key} {path} has no prompts")
    seen: dict = {}
    for item in out:
        rid = json.dumps(item.id, sort_keys=True)
        if rid in seen:
            raise ValueError(
                f"{key} {path}: id {item.id!r} appears more than once (items {seen[rid]} and "
                f"{len(seen) + 1}); give every prompt its own id"
            )
        seen[rid] = len(seen) + 1
    return out


def read_input(path: str | Path, tokenizer, chat: bool, key: str = "input") -> list[Item]:
    """The prompts of ``path`` (:func:`parse_input`), encoded: a prompt that cannot run (bad
    fields, a chat without a template, no tokens) is an :class:`Item` with its ``error``.

    Args:
      path: the input file (JSONL or one prompt per line).
      tokenizer: the target's tokenizer.
      chat: wrap ``"prompt"`` texts in the chat template as a user turn.
      key: the config key that named the file (``input`` or ``prompts_file``), for errors.
    """
    return [
        Item(line.id, "", None, line.error)
        if line.error
        else _encoded(line.id, line.text, line.messages, tokenizer, chat)
        for line in parse_input(path, key)
    ]


def _jsonl_line(where: str, line: str) -> Line:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{where} is not JSON ({err.msg}); give one JSON object per line"
        ) from None
    if not isinstance(obj, dict) or "id" not in obj:
        raise ValueError(f'{where} has no "id"; give each line {{"id": ..., "prompt": ...}}')
    rid = obj["id"]
    if not isinstance(rid, str | int) or isinstance(rid, bool):
        raise ValueError(f"{where}: id {rid!r} must be a string or an integer")
    sampling = [k for k in PER_PROMPT_SAMPLING if k in obj]
    if sampling:
        raise ValueError(
            f"{where} sets {', '.join(sampling)} per prompt, which a batch job does not "
            f"support; set --config.{sampling[0]} for the whole job (or split the file)"
        )
    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt == has_messages:
        return Line(rid, error='give exactly one of "prompt" (text) or "messages" (a chat)')
    if has_prompt:
        if not isinstance(obj["prompt"], str):
            return Line(
                rid, error='"prompt" must be a string (a list of messages goes in "messages")'
            )
        return Line(rid, text=obj["prompt"])
    messages = obj["messages"]
    ok = (
        isinstance(messages, list)
        and messages
        and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in messages
        )
    )
    if not ok:
        problem = '"messages" must be a non-empty list of {"role": ..., "content": ...}'
        return Line(rid, error=problem)
    return Line(rid, messages=messages)


def _encoded(rid, text: str | None, messages, tokenizer, chat: bool) -> Item:
    """The item of a prompt text or a chat, encoded (a problem becomes its ``error``)."""
    if messages is None and chat:
        messages = [{"role": "user", "content": text}]
    if messages is not None:
        if tokenizer.chat_template is None:
            return Item(rid, "", None, "the tokenizer has no chat template; give a text prompt")
        try:
            text = tokenizer.apply_chat_template(messages)
        except Exception as err:  # a template's own complaint about the messages
            return Item(rid, "", None, f"the chat template failed: {err}")
    ids = tokenizer.encode(text, add_special_tokens=messages is None)  # see encode_chat
    if not ids:
        return Item(rid, text, None, "the prompt encodes to no tokens; give some text")
    return Item(rid, text, ids)
