"""Task 9.1: the n-gram proposer against a brute-force search, and a bound on the work it does."""

import random
from collections.abc import Sequence

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.speculative import NgramProposer



def occurrences(ids: list[int], min_n: int, max_n: int) -> tuple[int, list[int]]:
    """(n, the starts of its earlier occurrences) for the longest suffix that recurs; (0, []) if none."""
    for n in range(max_n, min_n - 1, -1):
        if len(ids) <= n:
            continue
        starts = [s for s in range(len(ids) - n) if ids[s : s + n] == ids[len(ids) - n :]]
        if starts:
            return n, starts
    return 0, []


@pytest.mark.task("9.1")
@given(ids=st.lists(st.integers(0, 3), max_size=30), sizes=st.sampled_from([(1, 1), (1, 3), (2, 3), (2, 5), (4, 4)]),
       k=st.integers(0, 7))
@example(ids=[1, 2, 3, 9, 1, 2], sizes=(1, 3), k=2)  # the book's example: [3, 9]
@example(ids=[1, 2, 3, 1, 2, 3, 1, 2], sizes=(1, 3), k=5)  # the continuation runs into the suffix: [3, 1, 2]
@example(ids=[5, 6, 7, 6], sizes=(2, 3), k=3)  # only a 1-token suffix recurs, below min_n: []
@example(ids=[1, 2, 3], sizes=(1, 3), k=4)  # no match
@example(ids=[7], sizes=(1, 3), k=4)  # one token: nothing earlier
@example(ids=[], sizes=(1, 3), k=4)  # no tokens
@example(ids=[1, 2, 1, 2], sizes=(1, 3), k=0)  # k == 0
@example(ids=[2, 0, 1, 3, 3, 2, 0], sizes=(1, 3), k=3)  # the match is at the very start
@example(ids=[7, 7, 7], sizes=(1, 3), k=4)  # the occurrence overlaps the suffix: [7]
@example(ids=[1, 2, 0, 5, 2, 3, 1, 2], sizes=(1, 3), k=2)  # [2] recurs nearer than [1, 2]: the longer wins, [0, 5]
def test_propose_copies_what_followed_an_earlier_occurrence_of_the_longest_suffix(ids, sizes, k):
    min_n, max_n = sizes
    got = NgramProposer(min_n, max_n).propose(ids, k)
    n, starts = occurrences(ids, min_n, max_n)
    where = f"propose({ids}, k={k}) with min_n={min_n}, max_n={max_n}"
    assert isinstance(got, list), f"{where} returned {type(got).__name__}, not a list"
    if k == 0 or not starts:
        why = "k is 0" if k == 0 else f"no suffix of {min_n}..{max_n} tokens occurs earlier"
        assert got == [], f"{where} = {got}: expected [] ({why})"
        return
    allowed = {tuple(ids[s + n : s + n + k]) for s in starts}
    assert tuple(got) in allowed, (
        f"{where} = {got}: the longest suffix that recurs is {ids[len(ids) - n:]} (n={n}), found at {starts}; "
        f"the drafts must be the up to {k} tokens after one of those, stopping only where the sequence ends: "
        f"one of {sorted(list(a) for a in allowed)}")


@pytest.mark.task("9.1")
def test_propose_and_init_reject_bad_arguments():
    for min_n, max_n in [(0, 3), (3, 2), (-1, 1)]:
        with pytest.raises(ValueError):
            NgramProposer(min_n, max_n)
            pytest.fail(f"NgramProposer({min_n}, {max_n}) accepted: need 1 <= min_n <= max_n")
    with pytest.raises(ValueError):
        NgramProposer().propose([1, 2, 1, 2], -1)
        pytest.fail("propose(..., k=-1) returned: a negative k is a ValueError")


class CountingSequence(Sequence):
    """A token list that counts every token read from it (an index, a slice's length, an iteration step)."""

    def __init__(self, ids):
        self._ids, self.reads = list(ids), 0

    def __len__(self):
        return len(self._ids)

    def __getitem__(self, index):
        item = self._ids[index]
        self.reads += len(item) if isinstance(index, slice) else 1
        return item

    def __iter__(self):
        for t in self._ids:
            self.reads += 1
            yield t


@pytest.mark.task("9.1")
@pytest.mark.parametrize("length,vocab,max_n", [(100_000, 1000, 3), (50_000, 4, 12)])
def test_propose_reads_each_token_a_bounded_number_of_times(length, vocab, max_n):
    """A long random sequence whose longest suffix never recurs: the whole sequence must be searched,
    and the contract's O(len * max_n) allows a few reads per token and suffix length, not a scan per
    position. (A search that is quadratic in the length also runs past the test's time limit.)"""
    rng = random.Random(0)
    ids = CountingSequence([rng.randrange(vocab) for _ in range(length)])
    got = NgramProposer(1, max_n).propose(ids, 4)
    assert 1 <= len(got) <= 4, f"a 1-token suffix recurs in {length} random tokens, yet propose returned {got}"
    limit = 4 * (max_n + 1) * max_n * length
    assert ids.reads <= limit, (
        f"propose read {ids.reads:,} tokens of a {length:,}-token sequence (max_n={max_n}): more than {limit:,}; "
        f"the proposer runs for every request every step, so its work must stay O(len * max_n)")


class CountedToken(int):
    """A token id that counts every comparison made with it (an int in every other way)."""

    comparisons = 0

    def __eq__(self, other):
        CountedToken.comparisons += 1
        return int.__eq__(self, other)

    def __ne__(self, other):
        CountedToken.comparisons += 1
        return int.__ne__(self, other)

    __hash__ = int.__hash__


@pytest.mark.task("9.1")
@pytest.mark.parametrize("pattern,repeats,max_n", [([7], 6_000, 3), ([1, 2, 3], 2_000, 5), ([4, 4, 5], 2_000, 8)])
def test_propose_compares_a_bounded_number_of_tokens_on_repeating_text(pattern, repeats, max_n):
    """Text that repeats matches everywhere: a match must stop at max_n tokens (and the search once a match of
    max_n is found), or the work grows with the square of the length. Every comparison of two tokens is counted,
    whether the sequence is read directly or copied first."""
    ids = [CountedToken(t) for t in pattern * repeats]
    CountedToken.comparisons = 0
    got = NgramProposer(1, max_n).propose(ids, 4)
    continuation = (pattern * 5)[len(ids) % len(pattern):][:4]  # what follows any earlier occurrence
    assert got and [int(t) for t in got] == continuation[: len(got)], f"the drafts continue the pattern, got {got}"
    limit = 4 * max_n * len(ids)
    assert CountedToken.comparisons <= limit, (
        f"propose compared tokens {CountedToken.comparisons:,} times on {len(ids):,} tokens of repeating text "
        f"(max_n={max_n}): more than {limit:,}. Does a match stop growing at max_n tokens, and the search at "
        "the first match of max_n?")
