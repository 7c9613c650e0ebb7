"""Error text for one-line messages (imports nothing heavy)."""

from __future__ import annotations


def first_line(err: BaseException, limit: int = 240) -> str:
    """``Type: first line`` of an exception's message, cut to ``limit`` characters.

    Libraries such as orbax and tensorstore put pages of specs into their messages; an error
    line for a user keeps the first line only.
    """
    lines = str(err).strip().splitlines()
    text = lines[0].strip() if lines else ""
    if len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
