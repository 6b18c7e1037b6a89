"""Stop strings: found across token boundaries, cut from the text, never half-streamed.

A stop string may arrive split over several tokens ("<", "/an", "swer>").
So text is released in two parts: what can no longer be the start of a stop
string goes out at once; a tail that could still grow into one is held back
until the next token decides. When a stop string appears, the text ends
just before it.
"""

from __future__ import annotations

from collections.abc import Sequence


# ANCHOR: find_stop
def find_stop(text: str, stops: Sequence[str], start: int = 0) -> int | None:
    """Index in `text` where the stop string that completes first begins, of the matches that end after `start`.

    "Completes first": the match whose last character comes earliest, as the
    text streams; of matches that end at the same character, the longest. A
    filter that sees the text in pieces can keep this rule whatever the
    pieces: `find_stop("><<", ["<", "><<"])` is 1 (the "<" is complete
    before "><<" is). None when no stop string ends after `start`. Matches that
    end at or before `start` were looked at before (the caller passes how far
    it had already searched), so searching costs what the new text costs.
    """
    # Idea: a match that ends in the new text may begin in the old text.
    # Stuck? `miniyaie hint 5.6` prints hints, one level at a time.
    # TODO(Task 5.6): Stop strings. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 6: Stop strings — see book/src/ch05_engine.md')


def held_back(text: str, stops: Sequence[str]) -> int:
    """How many characters at the end of `text` could be the beginning of a stop string.

    The length of the longest proper prefix of any stop string that `text` ends
    with (0 when none): that tail may not be shown yet, and nothing else is held.
    """
    # Idea: the tail to hold back is the longest unfinished start of some stop string.
    # Stuck? `miniyaie hint 5.6` prints hints, one level at a time.
    # TODO(Task 5.6): Stop strings. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 6: Stop strings — see book/src/ch05_engine.md')
# ANCHOR_END: find_stop


# ANCHOR: stop_filter
class StopStringFilter:
    """Feeds text deltas through; returns what may be shown and whether a stop string ended it."""

    def __init__(self, stops: Sequence[str]):
        self.stops = list(stops)
        self.text = ""  # everything received (cut at the stop string once found)
        self.released = 0  # characters of text already returned
        self.stopped = False

    def push(self, delta: str) -> str:
        """Add a delta; return the text that may be shown now ("" once stopped).

        Invariants: the pushes' results, joined, are always a prefix of the received text cut
        before its first stop string (the one that completes first, as `find_stop` ranks them,
        even one split across deltas), whatever the deltas; only a
        tail that could still grow into a stop string (held_back) waits; with no stop strings
        everything goes out at once. When a stop string appears, `stopped` becomes True, the
        text before it goes out and everything after it is dropped, later pushes included.
        Searching costs what the new text costs (find_stop's `start`).
        """
        # Idea: release up to the first stop, or up to the tail that might become one.
        # Stuck? `miniyaie hint 5.6` prints hints, one level at a time.
        # TODO(Task 5.6): Stop strings. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 6: Stop strings — see book/src/ch05_engine.md')

    def flush(self) -> str:
        """The held-back tail, once no more text will come."""
        return self._release(len(self.text))

    def _release(self, end: int) -> str:
        """text[released:end], and released moves to end (never back)."""
        out = self.text[self.released : end]
        self.released = max(self.released, end)
        return out
# ANCHOR_END: stop_filter
