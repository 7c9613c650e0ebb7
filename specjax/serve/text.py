"""A request's text as its ids come: whole characters only, cut exactly at a stop string."""

from __future__ import annotations


class TextStream:
    """Detokenizes a growing id list into text deltas.

    A delta never ends inside a UTF-8 sequence nor with text that may begin a stop string (both
    are held back until the next ids settle them); once a stop string appears the text ends just
    before it (:attr:`stopped`).
    """

    def __init__(self, tokenizer, stops: tuple[str, ...] = ()):
        self.tokenizer, self.stops = tokenizer, stops
        self.ids: list[int] = []
        self.text = ""  # what was handed out so far
        self.stopped = False

    def push(self, ids: list[int]) -> str:
        """The new text ``ids`` settle."""
        if self.stopped:
            return ""
        self.ids.extend(ids)
        full = self.tokenizer.decode(self.ids)
        sent = len(self.text)
        hits = [k for k in (full.find(s, sent) for s in self.stops) if k >= 0]
        if hits:
            self.stopped = True
            return self._hand(full[: min(hits)])
        end = len(full.rstrip("\ufffd"))  # an incomplete UTF-8 sequence: wait for the rest
        hold = 0
        for stop in self.stops:  # the longest tail that may begin a stop string
            for n in range(min(len(stop) - 1, end - sent), hold, -1):
                if full[end - n : end] == stop[:n]:
                    hold = n
                    break
        return self._hand(full[: end - hold])

    def finish(self) -> str:
        """What is left once no ids will come."""
        if self.stopped:
            return ""
        return self._hand(self.tokenizer.decode(self.ids))

    def _hand(self, upto: str) -> str:
        delta = upto[len(self.text) :]
        self.text = upto if len(upto) > len(self.text) else self.text
        return delta
