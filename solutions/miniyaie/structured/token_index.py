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
    # Nudge: 49,152 tokens from every state reached: decide what Python loops over and what one tensor operation does.
    # Hint 1: Token i is allowed from `state` if reading its bytes one by one through the DFA
    #   never hits DEAD; where it ends is the state after its last byte. Walking the
    #   vocabulary token by token in Python is V x L steps of the interpreter (49,152 tokens
    #   for SmolLM2): walk all tokens at once instead, column j of token_bytes at step j, and
    #   keep walking only the tokens still alive and not yet ended, so the work shrinks.
    # Hint 2: ends = full([V], DEAD). Keep `ids` (the tokens still walking: at first all with
    #   length > 0) and `current` (their states: all `state`). At byte position j: move them,
    #   nxt = next_state[current, token_bytes[ids, j]]; keep only nxt != DEAD; those whose
    #   length is j + 1 have ended: write their state into ends; go on with the others.
    # Hint 3:
    #   ends = full([V], DEAD); ids = nonzero(lengths > 0); current = full([len(ids)], state)
    #   for j in range(L) while ids is not empty:
    #       nxt = next_state[current, token_bytes[ids, j]]; alive = nxt != DEAD
    #       ids, nxt = ids[alive], nxt[alive]; done = lengths[ids] == j + 1
    #       ends[ids[done]] = nxt[done]; ids, current = ids[~done], nxt[~done]
    #   return ends
    # BEGIN SOLUTION 8.2: The token index
    ends = torch.full((token_bytes.shape[0],), DEAD, dtype=torch.int64)
    ids = (lengths > 0).nonzero().flatten()
    current = torch.full((len(ids),), state, dtype=torch.int64)
    for j in range(token_bytes.shape[1]):
        if len(ids) == 0:
            break
        nxt = next_state[current, token_bytes[ids, j]]
        alive = nxt != DEAD
        ids, nxt = ids[alive], nxt[alive]
        done = lengths[ids] == j + 1
        ends[ids[done]] = nxt[done]
        ids, current = ids[~done], nxt[~done]
    return ends
    # END SOLUTION
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
        # Nudge: the walk says which tokens keep the pattern alive; the end of the text is a token too.
        # Hint 1: The walk (walk_vocabulary) gives each token's end state; alive means not DEAD. The
        #   mask must cover the model's whole vocabulary (self.size), which may be longer than
        #   the tokenizer's. End-of-sequence tokens have no bytes: their rule is the DFA's
        #   accepting flag for this state. (`mask`, below, keeps each state's result.)
        # Hint 2: ends = self.ends(state) (the walk); mask = zeros(self.size, bool);
        #   mask[:len(ends)] = ends != DEAD; for every id in self.vocabulary.eos_token_ids,
        #   mask[id] = self.dfa.accepting[state].
        # Hint 3:
        #   ends = self.ends(state)
        #   mask = zeros(size, bool); mask[: len(ends)] = ends != DEAD
        #   for eos in vocabulary.eos_token_ids: mask[eos] = bool(dfa.accepting[state])
        #   return mask
        # BEGIN SOLUTION 8.2: The token index
        ends = self.ends(state)
        mask = torch.zeros(self.size, dtype=torch.bool)
        mask[: len(ends)] = ends != DEAD
        for eos in self.vocabulary.eos_token_ids:
            mask[eos] = bool(self.dfa.accepting[state])
        return mask
        # END SOLUTION
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
        # Nudge: where is a state's mask remembered, and what happens when two threads build the same one?
        # Hint 1: Decoding asks for the mask of the current state at every step and comes back
        #   to the same states again and again (a JSON key, a string's body): compute each once.
        #   Keep it packed (6 KB a state for 49,152 tokens, not a 49 KB bool tensor). Two threads
        #   may miss the same state at once: "look, then build" must be one step for a state, or
        #   both build it. Hold a lock across the second look and the build (self._build_lock,
        #   not self._lock, which nbytes needs meanwhile); a state already built needs no lock.
        # Hint 2: Look the state up in self._masks; found: return it unpacked. Missing: take the
        #   build lock and look again (another thread may have built it while this one waited).
        #   Still missing: compute allowed(state) on one thread (_OneThread), pack it, and under
        #   self._lock store it and count it in mask_builds. Return the stored mask unpacked.
        # Hint 3:
        #   packed = self._masks.get(state)
        #   if packed is None:
        #       with self._build_lock:
        #           packed = self._masks.get(state)   # built by another thread while this one waited?
        #           if packed is None:
        #               with _OneThread(): packed = _pack(self.allowed(state))
        #               with self._lock: self._masks[state] = packed; self.mask_builds += 1
        #   return _unpack(packed, self.size)
        # BEGIN SOLUTION 8.2: The token index
        packed = self._masks.get(state)
        if packed is None:
            with self._build_lock:
                packed = self._masks.get(state)  # another thread may have built it while this one waited
                if packed is None:
                    with _OneThread():
                        packed = _pack(self.allowed(state))
                    with self._lock:
                        self._masks[state] = packed
                        self.mask_builds += 1
        return _unpack(packed, self.size)
        # END SOLUTION
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
        # Nudge: only one token is needed here, and the end of the text is a token with no bytes.
        # Hint 1: The masks say which tokens are allowed; the state after the chosen one is found
        #   by reading its few bytes through the table, one at a time (a walk of the whole
        #   vocabulary would cost a mask's build per step). End-of-sequence has its own rule.
        # Hint 2: If token_id is an end-of-sequence id: state if accepting[state] else DEAD. Else
        #   get its bytes (DEAD if the id is out of range or the token is empty) and follow
        #   next_state[state, byte] for each byte, stopping at DEAD.
        # Hint 3:
        #   if token_id in eos_token_ids: return state if accepting[state] else DEAD
        #   data = token_bytes[token_id] if 0 <= token_id < len(vocabulary) else None
        #   if not data: return DEAD
        #   for byte in data: state = table[state, byte]; if state == DEAD: return DEAD
        #   return state
        # BEGIN SOLUTION 8.2: The token index
        if token_id in self.vocabulary.eos_token_ids:
            return state if bool(self.dfa.accepting[state]) else DEAD
        data = self.vocabulary.token_bytes[token_id] if 0 <= token_id < len(self.vocabulary) else None
        if not data:
            return DEAD
        table = self.dfa.next_state
        for byte in data:
            state = int(table[state, byte])
            if state == DEAD:
                return DEAD
        return state
        # END SOLUTION
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
