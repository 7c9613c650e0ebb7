"""benchlib.ngram_matches (scripts/pinned_widths.py --matches): prompt lookup's first tokens
by match length."""

from __future__ import annotations

from benchlib.ngram_matches import match_hits


def test_match_hits_counts_the_longest_most_recent_match():
    prompt = [1, 2, 3, 9, 2, 3, 4]
    # Position 7 (context ends "2 3 4"): no 3-gram, 2-gram "3 4" absent, 1-gram "4" absent.
    # Position 8 (ends "4 1"): "1" at 0 -> proposes 2; the answer has 2: right.
    # Position 9 (ends "4 1 2"): 2-gram "1 2" at 0 -> proposes 3; the answer has 5: wrong.
    # Position 10 (ends "1 2 5"): "5" never seen before: no match.
    answer = [1, 2, 5, 7]
    hits = match_hits(prompt, answer)
    assert hits == {"0": [2, 0], "1": [1, 1], "2": [1, 0], "3": [0, 0]}, hits
