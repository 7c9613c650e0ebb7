"""How often prompt lookup's first token is right, by the length of its match
(``scripts/pinned_widths.py --matches``)."""

from __future__ import annotations


def match_hits(prompt: list[int], answer: list[int], longest: int = 3) -> dict:
    """Per match length n: ``[proposals, first tokens right]`` of prompt lookup (the longest
    suffix of up to ``longest`` tokens seen before, its most recent occurrence) at each
    position of the greedy ``answer``; ``"0"``: positions without a match."""
    seq, out = prompt + answer, {str(n): [0, 0] for n in range(longest + 1)}
    for t in range(len(prompt), len(seq)):
        ctx, found = seq[:t], 0
        for n in range(longest, 0, -1):
            starts = [s for s in range(len(ctx) - n) if ctx[s : s + n] == ctx[-n:]]
            if starts:
                found = n
                out[str(n)][1] += int(ctx[starts[-1] + n] == seq[t])
                break
        out[str(found)][0] += 1
    return out
