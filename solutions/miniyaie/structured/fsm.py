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
    # Nudge: at 20,000 states, how many times may your search visit each state?
    # Hint 1: A state is live when it accepts or has a transition into a live state. Searching
    #   forward from each state to see whether it reaches an accepting one visits the whole
    #   automaton once per state (20,000^2 steps at the state cap). Turn the question around:
    #   the live states are exactly the ones an accepting state reaches along reversed edges.
    # Hint 2: Build the reversed edges once (target -> its sources), skipping transitions whose
    #   class has no writable character (unless it is `other`). Start with the accepting
    #   states marked and on a to-do list; take a state off the list and mark and push each
    #   of its sources not yet marked. The marked set is the answer.
    # Hint 3:
    #   usable = {k for k, c in enumerate(classes) if k == other or any(writable(ch) for ch in c)}
    #   sources = {}  # target -> set of states with an edge into it
    #   for s, moves in enumerate(transitions): for k, t in moves.items(): if k in usable: sources[t].add(s)
    #   live = {s accepting}; todo = list(live)
    #   while todo: for s in sources.get(todo.pop(), ()): if s not in live: live.add(s); todo.append(s)
    #   return live
    # BEGIN SOLUTION 8.1: Regex to byte automaton
    usable = {k for k, c in enumerate(chars.classes) if k == chars.other or any(map(writable, c))}
    sources: dict[int, set[int]] = {}
    for state, moves in enumerate(chars.transitions):
        for k, target in moves.items():
            if k in usable:
                sources.setdefault(target, set()).add(state)
    live = {s for s, accepts in enumerate(chars.accepting) if accepts}
    todo = list(live)
    while todo:
        for source in sources.get(todo.pop(), ()):
            if source not in live:
                live.add(source)
                todo.append(source)
    return live
    # END SOLUTION
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
    # Nudge: a character is a path of bytes: which intermediate states can all paths share, and which cannot?
    # Hint 1: An intermediate state means "some bytes of a character read, from one character
    #   state, toward where that character leads". From a character state, the characters it
    #   reads are the named ones (each to its class's target, or refused) and, if `other` has
    #   a live target T, every other well-formed sequence, all to T. The states that read "the
    #   rest of any character" into T depend only on T and on which byte ranges are left (a
    #   suffix of a UTF8_SEQUENCES row): make each once and share it between states and rows;
    #   that keeps a state reading any character but `"` at 8 (7 inside characters, the fewest). But where a named character begins like other
    #   characters (é is C3 A9, and C3 begins 63 more), the state after C3 needs a row of its
    #   own: A9 goes where é goes (or dies), the rest of C3's continuations to T. Make no
    #   state that leads nowhere.
    # Hint 2: Rows for the live character states come first. tail(T, ranges) (memoised) is the
    #   state that reads one byte of each range in turn and arrives in T (no ranges: T itself).
    #   For each live state: its named characters' encodings, each with its destination (the
    #   byte number of its class's target if that target is live, else DEAD; when `other` has
    #   no live target only characters with a live destination matter), and the set of their
    #   proper prefixes. Then a recursive fill of the row for prefix p (the root: p = b"",
    #   every row of UTF8_SEQUENCES; deeper: the one range that follows p in p's row): if T
    #   exists, every byte of each range goes to tail(T, the ranges after it); then each byte b
    #   with p + b a named encoding goes to its destination, and each b with p + b a proper
    #   prefix goes to a fresh state filled the same way (DEAD if that row has no live byte).
    # Hint 3:
    #   row_of = {lead: its UTF8_SEQUENCES row for every lead byte}; number = {s: i for i, s in enumerate(sorted(live))}
    #   def fill(prefix, ranges, named, children, T) -> row:
    #       row = [DEAD] * 256
    #       if T is not None: for (low, high), rest in ranges: row[low..high] = tail(T, rest)
    #       for b in children[prefix]:
    #           key = prefix + b
    #           if key in named: row[b] = named[key]
    #           else: r = row_of[key[0]]; sub = fill(key, [(r[len(key)], r[len(key)+1:])], ...)
    #                 row[b] = new state holding sub if sub has a live byte else DEAD
    #       return row
    #   for s in sorted(live): budget.check(len(rows)); T = number[other's target] if it is live else None
    #       named = {c.encode(): number[t] or DEAD for each writable c of each class (only live ones if T is None)}
    #       children = {proper prefix: next bytes}; rows[number[s]] = fill(b"", [(r[0], r[1:]) for r in UTF8_SEQUENCES], ...)
    #   budget.check(len(rows)); return ByteDFA(tensor(rows), tensor(accepting), 0, len(live))
    # BEGIN SOLUTION 8.1: Regex to byte automaton
    order = sorted(live)
    number = {s: i for i, s in enumerate(order)}
    rows: list[list[int]] = [[DEAD] * 256 for _ in order]
    accepting = [chars.accepting[s] for s in order]
    row_of = {lead: seq for seq in UTF8_SEQUENCES for lead in range(seq[0][0], seq[0][1] + 1)}
    tails: dict[tuple, int] = {}  # (target, ranges still to read) -> the state shared by all who need it

    def add(row: list[int]) -> int:
        rows.append(row)
        accepting.append(False)
        return len(rows) - 1

    def tail(target: int, ranges: tuple) -> int:
        if not ranges:
            return target
        if (target, ranges) not in tails:
            (low, high), after = ranges[0], tail(target, ranges[1:])
            tails[target, ranges] = add([DEAD] * low + [after] * (high - low + 1) + [DEAD] * (255 - high))
        return tails[target, ranges]

    def fill(prefix: bytes, ranges, named: dict, children: dict, other: int | None) -> list[int]:
        row = [DEAD] * 256
        if other is not None:
            for (low, high), rest in ranges:
                row[low:high + 1] = [tail(other, rest)] * (high - low + 1)
        for byte in children.get(prefix, ()):
            key = prefix + bytes([byte])
            if key in named:
                row[byte] = named[key]
            else:
                seq = row_of[key[0]]
                sub = fill(key, [(seq[len(key)], seq[len(key) + 1:])], named, children, other)
                row[byte] = add(sub) if any(s != DEAD for s in sub) else DEAD
        return row

    roots = [(seq[0], seq[1:]) for seq in UTF8_SEQUENCES]
    for state in order:
        budget.check(len(rows))
        moves = {k: number.get(t, DEAD) for k, t in chars.transitions[state].items()}
        other = moves.get(chars.other, DEAD) if chars.other is not None else DEAD
        other = None if other == DEAD else other
        named, children = {}, {}
        for k, members in enumerate(chars.classes):
            destination = moves.get(k, DEAD)
            if destination == DEAD and other is None:
                continue
            for char in filter(writable, members):
                encoded = char.encode()
                named[encoded] = destination
                for cut in range(len(encoded)):
                    children.setdefault(encoded[:cut], set()).add(encoded[cut])
        rows[number[state]] = fill(b"", roots, named, children, other)
    budget.check(len(rows))
    return ByteDFA(torch.tensor(rows, dtype=torch.int64), torch.tensor(accepting), 0, len(order))
    # END SOLUTION
# ANCHOR_END: spell_in_utf8
