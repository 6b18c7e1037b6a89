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
    # Nudge: a match that ends in the new text may begin in the old text.
    # Hint 1: The caller already searched text[:start]; a stop string that straddles start (it
    #   began in old text and ends in new text) must still be found, so each stop string's
    #   search starts len(stop) - 1 characters before start. Rank the matches by where they
    #   end, not where they begin: "earliest beginning" would depend on how the text was cut
    #   into pieces (one piece "><<" against three pieces ">", "<", "<").
    # Hint 2: For each stop string, find its first match from max(0, start - len(stop) + 1);
    #   that match also ends first among its own matches. Keep (end, begin) of each match found
    #   and return the begin of the smallest pair (earliest end, then earliest begin), or None.
    # Hint 3:
    #   matches = []
    #   for stop in stops:
    #       begin = text.find(stop, max(0, start - len(stop) + 1))
    #       if begin >= 0: matches.append((begin + len(stop), begin))
    #   return min(matches)[1] if matches else None
    # BEGIN SOLUTION 5.6: Stop strings
    matches = []
    for stop in stops:
        begin = text.find(stop, max(0, start - len(stop) + 1))
        if begin >= 0:
            matches.append((begin + len(stop), begin))
    return min(matches)[1] if matches else None
    # END SOLUTION


def held_back(text: str, stops: Sequence[str]) -> int:
    """How many characters at the end of `text` could be the beginning of a stop string.

    The length of the longest proper prefix of any stop string that `text` ends
    with (0 when none): that tail may not be shown yet, and nothing else is held.
    """
    # Nudge: the tail to hold back is the longest unfinished start of some stop string.
    # Hint 1: If the text ends with "Obs" and a stop string is "Observation", the next tokens
    #   may complete it, and text shown can not be taken back: hold "Obs". A whole stop string
    #   at the end is not "could be": find_stop handles it. Holding more than needed delays
    #   the stream; holding less leaks part of a stop string to the client.
    # Hint 2: For every stop string, try its prefixes from the longest proper one (length
    #   len(stop) - 1, but not longer than the text) down to 1; the first one the text ends
    #   with is that stop's candidate. Return the longest candidate over all stop strings.
    # Hint 3:
    #   longest = 0
    #   for stop in stops:
    #       for size in range(min(len(stop) - 1, len(text)), longest, -1):
    #           if text.endswith(stop[:size]): longest = size; break
    #   return longest
    # BEGIN SOLUTION 5.6: Stop strings
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest
    # END SOLUTION
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
        # Nudge: release up to the first stop, or up to the tail that might become one.
        # Hint 1: Keep all the text received and how much of it was released. A new delta may
        #   complete a stop string that began in earlier text, so search where the old text
        #   ended (find_stop looks back across that boundary). If one is found the text ends
        #   there for good. If not, the text can go out except the tail that might still become
        #   one (held_back). Released text is never released twice.
        # Hint 2: Once stopped, return "". Remember len(self.text), append the delta. Without stop
        #   strings release everything. Else find_stop from the remembered length: when found, cut
        #   self.text there, set stopped, release up to the cut; otherwise release up to
        #   len(text) - held_back(text, stops). self._release(end) (given) returns
        #   text[released:end] and moves released forward.
        # Hint 3:
        #   if stopped: return ""
        #   searched = len(text); text += delta
        #   if not stops: return _release(len(text))
        #   cut = find_stop(text, stops, searched)
        #   if cut is not None: text, stopped = text[:cut], True; return _release(cut)
        #   return _release(len(text) - held_back(text, stops))
        # BEGIN SOLUTION 5.6: Stop strings
        if self.stopped:
            return ""
        searched_up_to = len(self.text)
        self.text += delta
        if not self.stops:
            return self._release(len(self.text))
        cut = find_stop(self.text, self.stops, searched_up_to)
        if cut is not None:
            self.text, self.stopped = self.text[:cut], True
            return self._release(cut)
        return self._release(len(self.text) - held_back(self.text, self.stops))
        # END SOLUTION

    def flush(self) -> str:
        """The held-back tail, once no more text will come."""
        return self._release(len(self.text))

    def _release(self, end: int) -> str:
        """text[released:end], and released moves to end (never back)."""
        out = self.text[self.released : end]
        self.released = max(self.released, end)
        return out
# ANCHOR_END: stop_filter
