"""Shape buckets: prompt length and batch rounded up to a few sizes, so that prompts of different
lengths and batches of different sizes reuse one compiled program.

Padding never changes a row's output: padded prompt positions sit past the row's length (their
cache entries are stale and overwritten), and padding rows start ``done``, keep their own PRNG
keys (row b always draws from ``fold_in(key, b)``) and are dropped from the results.
"""

from __future__ import annotations

import dataclasses


def round_up(n: int, sizes: tuple[int, ...], multiple_of: int = 1) -> int:
    """The smallest size in ``sizes`` that is >= ``n`` and a multiple of ``multiple_of``; past
    the largest, ``n`` rounded up to a multiple of the largest (and of ``multiple_of``)."""
    for size in sizes:
        if size >= n and size % multiple_of == 0:
            return size
    step = max(sizes[-1], 1)
    size = -(-n // step) * step
    while size % multiple_of:
        size += step
    return size


@dataclasses.dataclass(frozen=True)
class ShapeBuckets:
    """Sizes that prompt batches are padded to before compiling.

    Attributes:
      prompt: prompt lengths (tokens), ascending: the longest prompt of a batch is padded to the
        smallest that fits (past the largest, to a multiple of it), but never past what the
        models' ``max_seq_len`` leaves after ``max_new_tokens`` and the draft tree.
      batch: batch sizes (rows), ascending; on a mesh also a multiple of the ``data`` axis.
    """

    prompt: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048, 4096)
    batch: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)

    def __post_init__(self):
        for name in ("prompt", "batch"):
            sizes = getattr(self, name)
            if not sizes or any(s < 1 for s in sizes) or list(sizes) != sorted(set(sizes)):
                raise ValueError(
                    f"{name} buckets must be ascending positive sizes, got {sizes}; "
                    "e.g. (64, 128, 256)"
                )

    def prompt_length(self, longest: int, limit: int) -> int:
        """The padded prompt length for a batch whose longest prompt is ``longest`` tokens,
        at most ``limit`` (>= ``longest``)."""
        return max(longest, min(round_up(longest, self.prompt), limit))

    def batch_size(self, rows: int, multiple_of: int = 1) -> int:
        """The padded batch for ``rows`` prompts."""
        return round_up(rows, self.batch, multiple_of)


DEFAULT = ShapeBuckets()
"""Powers of two: prompts from 64 tokens, batches from 1 row."""

EXACT = ShapeBuckets(prompt=(1,), batch=(1,))
"""No padding: every prompt length and batch size compiles its own program."""


def parse_sizes(text: str, what: str) -> tuple[int, ...]:
    """``"64,128,256"`` -> ``(64, 128, 256)``; ``""`` -> ``(1,)`` (exact shapes); one clear
    error otherwise."""
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip()) or (1,)
    except ValueError:
        raise ValueError(
            f"{what} must be comma-separated integers like '64,128,256', got {text!r}"
        ) from None
    return sizes
