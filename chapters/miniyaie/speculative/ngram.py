"""Prompt-lookup decoding: drafts copied from the request's own tokens (Task 9.1).

A model asked to quote, summarise, edit code or fill a template writes
again what is already in its context. The proposer bets on that: it finds
the request's last few tokens earlier in the request and proposes what
followed them there. It costs no model at all, only a search in the tokens,
and it runs for every decoding request at every step, so that search must
stay cheap.
"""

from __future__ import annotations

from collections.abc import Sequence


class NgramProposer:
    """Proposes up to k drafts by finding the sequence's last n tokens earlier in the sequence.

    min_n, max_n: the shortest and longest suffix looked up (1 <= min_n <= max_n, else ValueError).
    The proposer keeps no state between calls: the engine passes each request's whole token list
    (prompt and output) every time.
    """

    def __init__(self, min_n: int = 1, max_n: int = 3):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.min_n, self.max_n = min_n, max_n

    # ANCHOR: propose
    def propose(self, token_ids: Sequence[int], k: int) -> list[int]:
        """Up to k drafts: the tokens that followed an earlier occurrence of the longest suffix that has one.

        The suffix length n is the largest in [min_n, max_n] such that the last n tokens of token_ids
        also occur starting at an earlier position (the occurrence may overlap the suffix itself). The
        drafts are the tokens that followed that occurrence in token_ids, at most k of them: fewer
        only when token_ids ends first, so they may run into the suffix itself. Which earlier
        occurrence of that suffix to copy from is the implementer's choice (the tests accept any, as
        long as n is the largest): it decides what gets proposed, so choose it for acceptance.
        [] when no suffix of length min_n..max_n occurs earlier, or when k == 0. ValueError when k < 0.
        Work: O(len(token_ids) * max_n) token comparisons per call, whatever k and whatever matches.

        >>> NgramProposer(1, 3).propose([1, 2, 3, 9, 1, 2], 2)   # [1, 2] occurred at 0; 3, 9 followed
        [3, 9]
        >>> NgramProposer(1, 3).propose([1, 2, 3, 1, 2, 3, 1, 2], 5)  # [3, 1, 2] at 2: runs into the suffix
        [3, 1, 2]
        >>> NgramProposer(2, 3).propose([5, 6, 7, 6], 3)   # only [6] recurs, and n=1 is below min_n
        []
        """
        # Idea: where may an earlier occurrence start so that something follows it, and which one predicts best?
        # Stuck? `miniyaie hint 9.1` prints hints, one level at a time.
        # TODO(Task 9.1): The n-gram proposer. Replace this line with your code.
        raise NotImplementedError('Chapter 9, Task 1: The n-gram proposer — see book/src/ch09_speculative.md')
    # ANCHOR_END: propose
