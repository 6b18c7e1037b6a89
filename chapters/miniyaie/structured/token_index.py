"""The token index: for a state of the pattern's automaton, which tokens keep the output matchable.

Masking is exact: a token is allowed exactly when its bytes, fed to the
byte-level DFA from the current state, never reach the dead state. So the
model can only ever write text the pattern can still complete, and nothing
the pattern allows is taken away. It is cheap once built: a step costs one
mask per constrained row. The build is the cost (tokens x states walks),
paid only for the states decoding actually reaches. What is kept per state is
the mask alone, one bit per token (6 KB for SmolLM2's 49,152 tokens, not a
393 KB row of next states): the state after the token the model chose is
found by reading that one token's bytes through the DFA.
"""

from __future__ import annotations

import threading
import time

import numpy as np
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
    No Python loop over the tokens: a walk of 49,152 tokens runs at most one line
    of Python for every ten tokens (the test counts them with sys.settrace).
    """
    # Idea: 49,152 tokens from every state reached: decide what Python loops over and what one tensor operation does.
    # Stuck? `miniyaie hint 8.2` prints hints, one level at a time.
    # TODO(Task 8.2): The token index. Replace this line with your code.
    raise NotImplementedError('Chapter 8, Task 2: The token index — see book/src/ch08_structured_output.md')
# ANCHOR_END: walk_vocabulary


class TokenIndex:
    """A pattern's DFA over one vocabulary: allowed tokens and next states, per state, built on first use."""

    def __init__(self, dfa: ByteDFA, vocabulary: Vocabulary, model_vocab_size: int | None = None):
        self.dfa, self.vocabulary = dfa, vocabulary
        self.size = max(model_vocab_size or 0, len(vocabulary))
        self.token_bytes, self.lengths = vocabulary.byte_matrix()
        self._masks: dict[int, np.ndarray] = {}  # state -> its allowed tokens, packed 8 to a byte
        self._lock = threading.Lock()  # masks are built from the engine thread and from request workers
        self._build_lock = threading.Lock()
        self.build_seconds = 0.0  # time spent walking the vocabulary, over all states built so far
        self.compile_seconds = 0.0  # regex -> byte DFA (set by IndexCache, which compiles it)
        self.mask_builds = 0  # masks computed (by allowed) so far: one per state, however often it is asked for

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
        # TODO(Task 8.2): The token index. Replace this line with your code.
        raise NotImplementedError('Chapter 8, Task 2: The token index — see book/src/ch08_structured_output.md')
    # ANCHOR_END: allowed

    def ends(self, state: int) -> torch.Tensor:
        """Every token's state after it from `state` (the walk; timed in build_seconds, not kept)."""
        started = time.perf_counter()
        try:
            with _OneThread():
                return walk_vocabulary(self.dfa.next_state, state, self.token_bytes, self.lengths)
        finally:
            self.build_seconds += time.perf_counter() - started

    # ANCHOR: mask
    def mask(self, state: int) -> torch.Tensor:
        """allowed(state), what decoding reads at every step: computed once per state, then remembered.

        Each state's mask is computed (by one call of `self.allowed(state)`) the first time it
        is asked for, and `self.mask_builds` counts those computations: asking again for a state
        already built computes nothing. It is kept packed, one bit per token, in `self._masks`
        (state -> `_pack(mask)`; `_unpack(packed, self.size)` gives it back), which `nbytes` and
        `built_states` read and a compile process ships. Called from several threads at once (the
        engine thread and request workers): however many threads ask for one state together, its
        mask is computed once (one call of allowed, one count in mask_builds) and each of them gets
        that mask. While one state's mask is being computed, a state already built is answered, and
        so is `nbytes` (which takes `self._lock`).
        """
        # Idea: where is a state's mask remembered, and what happens when two threads build the same one?
        # Stuck? `miniyaie hint 8.2` prints hints, one level at a time.
        # TODO(Task 8.2): The token index. Replace this line with your code.
        raise NotImplementedError('Chapter 8, Task 2: The token index — see book/src/ch08_structured_output.md')
    # ANCHOR_END: mask

    @property
    def built_states(self) -> int:
        """How many states' masks exist so far (decoding builds one when it first reaches a state)."""
        return len(self._masks)

    @property
    def nbytes(self) -> int:
        """Bytes this index holds: the DFA's table and the masks built so far (the vocabulary is shared)."""
        with self._lock:
            masks = sum(m.nbytes for m in self._masks.values())
        return masks + self.dfa.next_state.nbytes + self.dfa.accepting.nbytes

    # ANCHOR: next_state
    def next_state(self, state: int, token_id: int) -> int:
        """The state after `token_id` from `state`: where its bytes lead, DEAD if the automaton dies on them.

        An end-of-sequence token (vocabulary.eos_token_ids) keeps the state where the pattern may
        end (accepting) and is DEAD elsewhere. An id the vocabulary does not have, or a token with
        no bytes (None, b""), is DEAD. Called once per generated token: one token, not the vocabulary.
        """
        # Idea: only one token is needed here, and the end of the text is a token with no bytes.
        # Stuck? `miniyaie hint 8.2` prints hints, one level at a time.
        # TODO(Task 8.2): The token index. Replace this line with your code.
        raise NotImplementedError('Chapter 8, Task 2: The token index — see book/src/ch08_structured_output.md')
    # ANCHOR_END: next_state

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


def _pack(mask: torch.Tensor) -> np.ndarray:
    """[size] bool -> [ceil(size / 8)] uint8, token i in bit i % 8 of byte i // 8."""
    return np.packbits(mask.numpy(), bitorder="little")


def _unpack(packed: np.ndarray, size: int) -> torch.Tensor:
    return torch.from_numpy(np.unpackbits(packed, count=size, bitorder="little").view(np.bool_))


class _OneThread:
    """torch on one thread for a few small ops: as fast, and far faster on busy cores (no thread wake-ups)."""

    def __enter__(self):
        self.previous = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.previous)
