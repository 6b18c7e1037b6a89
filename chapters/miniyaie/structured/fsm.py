"""A regex as a byte-level DFA: interegular builds the automaton over characters; Task 8.1 spells it in UTF-8.

A token is bytes, and a byte-level BPE token may hold half a character, so
the automaton the token index walks must read bytes: each character
transition becomes a short chain of byte transitions (one byte for ASCII,
two to four through intermediate states for the rest), and "any other
character" becomes every well-formed UTF-8 sequence. The result is a table
`next[state, byte]` (-1: dead) that a whole vocabulary can walk at once
(token_index.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from miniyaie.structured.char_automaton import CharDFA, char_dfa_of, install_budgeted_crawl
from miniyaie.structured.limits import Budget, CompileCancelled, Limits, PatternError, over, running_under
from miniyaie.structured.regex_check import check_regex

DEAD = -1
# Every well-formed UTF-8 sequence, as the inclusive byte ranges of its bytes in order (Unicode's
# Table 3-7): no overlong forms (C0, C1, E0 80..9F, F0 80..8F), no surrogates (ED A0..BF),
# nothing past U+10FFFF (F4 90.., F5..FF). A character is one row's bytes, one byte from each range.
UTF8_SEQUENCES = (
    ((0x00, 0x7F),),
    ((0xC2, 0xDF), (0x80, 0xBF)),
    ((0xE0, 0xE0), (0xA0, 0xBF), (0x80, 0xBF)),
    ((0xE1, 0xEC), (0x80, 0xBF), (0x80, 0xBF)),
    ((0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)),
    ((0xEE, 0xEF), (0x80, 0xBF), (0x80, 0xBF)),
    ((0xF0, 0xF0), (0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF)),
    ((0xF1, 0xF3), (0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF)),
    ((0xF4, 0xF4), (0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)),
)


def writable(char: str) -> bool:
    """Whether UTF-8 can write `char` (a lone surrogate, U+D800..U+DFFF, it cannot)."""
    return not 0xD800 <= ord(char) <= 0xDFFF


@dataclass
class ByteDFA:
    """next_state [num_states, 256] int64 (DEAD = -1); a state is accepting if `accepting[state]`."""

    next_state: torch.Tensor
    accepting: torch.Tensor  # [num_states] bool
    initial: int
    char_states: int  # states 0..char_states-1 sit between characters; the others inside one

    def forced_byte(self, state: int) -> int | None:
        """The one byte that may follow in `state`, if exactly one may and the pattern may not end here."""
        live = (self.next_state[state] != DEAD).nonzero().flatten()
        return int(live[0]) if len(live) == 1 and not bool(self.accepting[state]) else None


def compile_regex(pattern: str, budget: Budget | None = None, keyword: str = "regex", built: bool = False) -> ByteDFA:
    """The byte-level DFA of `pattern` (the whole output must match it), built within `budget`.

    PatternError (naming `keyword`) says what is wrong or which limit it is over; CompileCancelled
    if the budget's cancel event is set while it runs. `built`: the pattern was made here from parts
    already checked (a schema's regex, a choice list), so only its length is checked again."""
    import interegular

    budget = budget or Budget(Limits())
    if built:
        if len(pattern) > budget.limits.max_regex_length:
            raise over(f"{keyword}: the regex's length", len(pattern), budget.limits.max_regex_length, "max_regex_length")
    else:
        check_regex(pattern, budget.limits, keyword)
    budget.check()
    install_budgeted_crawl()
    with running_under(budget):
        try:
            parsed = interegular.parse_pattern(pattern)
            budget.check()
            fsm = parsed.to_fsm()  # not .reduce(): minimising cost more than it saved
        except (PatternError, CompileCancelled, NotImplementedError):  # the last: a task still to do
            raise
        except Exception as exc:  # interegular's errors are of several types, some without a message
            raise PatternError(f"invalid regex in {keyword} {pattern[:80]!r}: {type(exc).__name__} {exc}".rstrip()) from None
    chars = char_dfa_of(fsm)
    live = live_states(chars)
    if 0 not in live:
        raise PatternError(f"the regex in {keyword} {pattern[:80]!r} matches no string")
    return spell_in_utf8(chars, live, budget)


# ANCHOR: live_states
def live_states(chars: CharDFA) -> set[int]:
    """The states of `chars` from which some accepting state can be reached (the accepting ones included).

    A transition counts if its class holds a character UTF-8 can write (`writable`) or is `chars.other`.
    Example: transitions [{0: 1}, {}, {0: 2}], accepting [False, True, False] -> {0, 1}
    (state 2 only loops on itself). Must stay fast at 20,000 states (max_states).
    """
    # Idea: at 20,000 states, how many times may your search visit each state?
    # Stuck? `miniyaie hint 8.1` prints hints, one level at a time.
    # TODO(Task 8.1): Regex to byte automaton. Replace this line with your code.
    raise NotImplementedError('Chapter 8, Task 1: Regex to byte automaton — see book/src/ch08_structured_output.md')
# ANCHOR_END: live_states


# ANCHOR: spell_in_utf8
def spell_in_utf8(chars: CharDFA, live: set[int], budget: Budget) -> ByteDFA:
    """The byte-level DFA that reads the UTF-8 spelling of what `chars` reads, on its `live` states.

    chars: the character automaton (initial state 0). live: `live_states(chars)`, 0 among them.
    budget: the compile's allowance; call `budget.check(states)` with the number of byte states
    made so far at least once per character state and once more with the total when done, and
    let what it raises go through (PatternError past max_states or the deadline, CompileCancelled).

    Returns ByteDFA(next_state [S, 256] int64 with DEAD = -1, accepting [S] bool, initial 0,
    char_states = len(live)), where:
    - byte states 0..len(live)-1 are the live character states in increasing order (0 stays
      the initial state), accepting as they were; every later state sits inside a character
      and does not accept;
    - reading the UTF-8 bytes of a character string from 0 ends in the byte state of the
      character state the string leads to, and dies exactly where the character automaton
      refuses a character (a class with no transition there, a character of no class when
      `other` has none) or leads out of `live`;
    - nothing else is read: a byte sequence that is not well-formed UTF-8 (UTF8_SEQUENCES)
      dies, and a few bytes that begin a character stay alive exactly when some character
      that begins with them would be read (a token may end inside a character);
    - every state can reach an accepting state; a lone surrogate in a class is left out;
    - size: one character state that reads any character but `"` back to itself takes at most 10
      byte states, and a chain of n character states that each read any character to the next
      at most 10 * n.
    """
    # Idea: a character is a path of bytes: which intermediate states can all paths share, and which cannot?
    # Stuck? `miniyaie hint 8.1` prints hints, one level at a time.
    # TODO(Task 8.1): Regex to byte automaton. Replace this line with your code.
    raise NotImplementedError('Chapter 8, Task 1: Regex to byte automaton — see book/src/ch08_structured_output.md')
# ANCHOR_END: spell_in_utf8
