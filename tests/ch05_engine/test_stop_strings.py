"""Stop strings: matched across delta boundaries, cut from the text, never shown in part."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.engine.stop_strings import StopStringFilter, find_stop, held_back

ALPHABET = "ab<>/ \n"


def expected_text(text: str, stops: list[str]) -> str:
    """The text cut where the stop that completes first begins (ties at one end: the longest)."""
    ends = [(text.find(s) + len(s), text.find(s)) for s in stops if s in text]
    return text[: min(ends)[1]] if ends else text


@pytest.mark.task("5.6")
@given(
    text=st.text(ALPHABET, max_size=40),
    stops=st.lists(st.text(ALPHABET, min_size=1, max_size=5), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 40), max_size=10),
)
@example(text="abc</ab>def", stops=["</ab>"], cuts=[3, 5, 6])
@example(text="a<b<<bb", stops=["<<b", "b<"], cuts=[1, 2, 3, 4])
@example(text="xx\n\nyy", stops=["\n\n"], cuts=[3])
@example(text="aaab", stops=["aab"], cuts=[1, 2, 3])
@example(text="b<a", stops=["<a", "ba"], cuts=[])  # the text before the stop ends like another stop's start
@example(text="><<", stops=["<", "><<"], cuts=[])  # a longer stop begins earlier but completes later
@example(text="><<", stops=["<", "><<"], cuts=[1, 2])  # ... the same text in pieces: the same answer
@example(text="xab", stops=["b", "ab"], cuts=[])  # two stops complete together: cut before the longer
@example(text="ab<x>cd<x>e", stops=["<x>"], cuts=[5, 7])  # pushes after the stop show nothing, a stop in them neither
def test_released_text_is_the_text_cut_before_the_first_stop(text, stops, cuts):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    deltas = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    f = StopStringFilter(stops)
    shown = ""
    for delta in deltas:
        shown += f.push(delta)
        assert expected_text(text, stops).startswith(shown), "never show text that a stop string later cuts"
        if f.stopped:
            assert shown == expected_text(text, stops), (
                "once a stop string is found, everything before it goes out in that same push (nothing is held back)")
    stopped = f.stopped
    shown += f.flush()
    assert shown == expected_text(text, stops)
    assert stopped == any(s in text for s in stops)


@pytest.mark.task("5.6")
def test_find_stop_and_held_back():
    assert find_stop("hello world", ["wor", "lo"], 0) == 3
    assert find_stop("hello world", ["lo"], 6) is None  # that match ended before position 6
    assert find_stop("hello world", ["lo w"], 6) == 3  # this one ends after it
    assert find_stop("><<", ["<", "><<"], 0) == 1, "the stop that completes first wins, not the one that begins first"
    assert find_stop("xab", ["b", "ab"], 0) == 1, "of stops that complete together, the longest"
    assert held_back("the end <", ["<stop>"]) == 1
    assert held_back("the end <st", ["<stop>", "st"]) == 3
    assert held_back("the end", ["<stop>"]) == 0
    assert held_back("abc", ["abc"]) == 0  # a whole match is found, not held back


@pytest.mark.task("5.6")
def test_find_stop_and_held_back_at_their_boundaries():
    # "lo" is text[3:5]: its last character is at index 4
    assert find_stop("hello world", ["lo"], 4) == 3, "a match whose last character is at `start` is new"
    assert find_stop("hello world", ["lo"], 5) is None, "a match that ended before `start` was found already"
    assert held_back("the end", []) == 0 and held_back("", ["<stop>"]) == 0, "nothing to hold back"
    assert held_back("x<", ["<"]) == 0, "a one-character stop string has no proper prefix to hold back"


@pytest.mark.task("5.6")
def test_each_push_searches_only_the_new_text(monkeypatch):
    """The contract's cost: a push searches what is new (find_stop's `start`), not the whole text again."""
    import miniyaie.engine.stop_strings as module

    searches = []
    real_find_stop = module.find_stop

    def recording_find_stop(text, stops, start=0):
        searches.append((len(text), start))
        return real_find_stop(text, stops, start)

    monkeypatch.setattr(module, "find_stop", recording_find_stop)
    stops = ["<end>", "##"]
    f = StopStringFilter(stops)
    pieces, received = ["a" * 60, "b" * 60, "c" * 60, "<e", "nd>"], 0
    for piece in pieces:
        before = len(searches)
        f.push(piece)
        assert len(searches) > before, "push looks for stop strings with find_stop (the contract names its `start`)"
        for _, start in searches[before:]:
            assert start >= received - (max(map(len, stops)) - 1), (
                f"a push after {received} characters searched from {start}: pass find_stop how far earlier "
                "pushes already searched, so each push costs what its new text costs")
        received += len(piece)
    assert f.stopped
