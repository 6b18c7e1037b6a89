"""The token index: for a state of the pattern's automaton, which tokens keep the output matchable.

Masking is exact: a token is allowed exactly when its bytes, fed to the
byte-level DFA from the current state, never reach the dead state. So the
model can only ever write text the pattern can still complete, and nothing
the pattern allows is taken away. It is cheap once built: a step costs one
mask per constrained row. The build is the cost (tokens x states walks);
we walk the whole vocabulary at once, one byte position at a time, and
only for the states decoding actually reaches, each cached once per pattern.
"""

from __future__ import annotations

import torch

from miniyaie.structured.fsm import DEAD, ByteDFA
from miniyaie.structured.vocabulary import Vocabulary


# ANCHOR: walk_vocabulary
def walk_vocabulary(next_state: torch.Tensor, state: int, token_bytes: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Where every token leads from `state`: [V] int64, DEAD (-1) where the automaton dies.

    next_state [S, 256]: the byte-level DFA (DEAD where a byte is not allowed).
    token_bytes [V, L]: token i's bytes in row i, padded after lengths[i].
    A token of length 0 (a special token) leads nowhere: DEAD. A token may end
    between two bytes of one character: that is a state like any other.
    """
    # Idea: walk all V tokens together, one byte position at a time, and drop a token as soon as it dies or ends.
    # Stuck? `miniyaie hint 8.1` prints hints, one level at a time.
    # TODO(Task 8.1): The token index. Replace this line with your code.
    raise NotImplementedError('Chapter 8, Task 1: The token index — see book/src/ch08_structured_output.md')
# ANCHOR_END: walk_vocabulary


class TokenIndex:
    """A pattern's DFA over one vocabulary: allowed tokens and next states, per state, built on first use."""

    def __init__(self, dfa: ByteDFA, vocabulary: Vocabulary, model_vocab_size: int | None = None):
        self.dfa, self.vocabulary = dfa, vocabulary
        self.size = max(model_vocab_size or 0, len(vocabulary))
        self.token_bytes, self.lengths = vocabulary.byte_matrix()
        self._ends: dict[int, torch.Tensor] = {}
        self.build_seconds = 0.0  # time spent walking the vocabulary, over all states built so far
        self.compile_seconds = 0.0  # regex -> byte DFA (set by IndexCache, which compiles it)

    # ANCHOR: allowed
    def allowed(self, state: int) -> torch.Tensor:
        """[size] bool: the tokens that may come next in `state`.

        A token is allowed if its walk from `state` stays alive; an
        end-of-sequence token only where the pattern may end (an accepting
        state). Ids the vocabulary does not have (a model's padding rows,
        special tokens) are never allowed.
        """
        # Idea: the walk says which tokens keep the pattern alive; the end of the text is a token too.
        # Stuck? `miniyaie hint 8.2` prints hints, one level at a time.
        # TODO(Task 8.2): Allowed tokens, end of text included. Replace this line with your code.
        raise NotImplementedError('Chapter 8, Task 2: Allowed tokens, end of text included — see book/src/ch08_structured_output.md')
    # ANCHOR_END: allowed

    def ends(self, state: int) -> torch.Tensor:
        """Every token's state after it from `state` (the walk, once per state)."""
        if state not in self._ends:
            import time

            started = time.perf_counter()
            previous = torch.get_num_threads()
            torch.set_num_threads(1)  # dozens of small ops: one thread is as fast, and far faster on busy cores
            try:
                self._ends[state] = walk_vocabulary(self.dfa.next_state, state, self.token_bytes, self.lengths)
            finally:
                torch.set_num_threads(previous)
            self.build_seconds += time.perf_counter() - started
        return self._ends[state]

    @property
    def built_states(self) -> int:
        """How many states' rows exist so far (decoding builds a row when it first reaches a state)."""
        return len(self._ends)

    def next_state(self, state: int, token_id: int) -> int:
        """The state after `token_id` (DEAD if it was not allowed; an end-of-sequence token keeps the state)."""
        if token_id in self.vocabulary.eos_token_ids:
            return state if bool(self.dfa.accepting[state]) else DEAD
        if token_id >= len(self.vocabulary):
            return DEAD
        return int(self.ends(state)[token_id])

    def build_all(self) -> int:
        """Walk every reachable state now (to measure the whole index); returns the number of states."""
        seen, todo = set(), [self.dfa.initial]
        while todo:
            state = todo.pop()
            if state in seen:
                continue
            seen.add(state)
            todo.extend(set(self.ends(state).unique().tolist()) - {DEAD} - seen)
        return len(seen)
