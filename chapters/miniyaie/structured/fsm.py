"""A regex as a byte-level DFA: interegular parses it into a DFA over characters; we spell the characters in UTF-8.

interegular (the parser Outlines uses) gives a DFA (not minimised: its
minimisation cost seconds on a 200-character string, and it saves only
states that decoding may never reach) whose transitions read *characters*, grouped into classes (its alphabet; one class,
"anything else", stands for every character the pattern does not name). A
token is bytes, so each character transition becomes a short chain of byte
transitions: one byte for ASCII, two to four through intermediate states
for the rest. The result is a table `next[state, byte]` (-1: dead) that a
whole vocabulary can walk at once (token_index.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from miniyaie.structured.limits import Budget, CompileCancelled, Limits, PatternError, current_budget, over, running_under
from miniyaie.structured.regex_check import check_regex

DEAD = -1
# UTF-8 lead bytes of 2-, 3- and 4-byte characters, and the continuation bytes.
_LEADS = {2: range(0xC2, 0xE0), 3: range(0xE0, 0xF0), 4: range(0xF0, 0xF5)}
_CONTINUATION = range(0x80, 0xC0)
# Leads whose second byte is narrower (no overlong encodings, no surrogates, nothing past U+10FFFF).
_SECOND = {0xE0: range(0xA0, 0xC0), 0xED: range(0x80, 0xA0), 0xF0: range(0x90, 0xC0), 0xF4: range(0x80, 0x90)}


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
    _install_budgeted_crawl()
    with running_under(budget):
        try:
            parsed = interegular.parse_pattern(pattern)
            budget.check()
            fsm = parsed.to_fsm()  # not .reduce(): minimising cost more than it saved
        except (PatternError, CompileCancelled):
            raise
        except Exception as exc:  # interegular's errors are of several types, some without a message
            raise PatternError(f"invalid regex in {keyword} {pattern[:80]!r}: {type(exc).__name__} {exc}".rstrip()) from None
    live = _live_states(fsm)
    if fsm.initial not in live:
        raise PatternError(f"the regex in {keyword} {pattern[:80]!r} matches no string")
    return _spell_in_utf8(fsm, live, budget)


def _live_states(fsm) -> set:
    """The states from which a final state can be reached (one backward search, not one search per state)."""
    sources: dict = {}
    for state, moves in fsm.map.items():
        for target in moves.values():
            sources.setdefault(target, set()).add(state)
    live, todo = set(fsm.finals), list(fsm.finals)
    while todo:
        for source in sources.get(todo.pop(), ()):
            if source not in live:
                live.add(source)
                todo.append(source)
    return live


def _install_budgeted_crawl() -> None:
    """Give interegular a crawl (its one loop that builds automata) that checks this thread's budget.

    interegular's own crawl finds a state with a list search (quadratic in the states); this one uses
    a dict, and stops the compile when the budget says so (deadline, state cap, cancellation)."""
    import interegular.fsm

    if interegular.fsm.crawl is not _budgeted_crawl:
        interegular.fsm.crawl = _budgeted_crawl


def _hashable(state):
    """interegular's crawl states are dicts, sets and tuples of them: a key equal exactly when they are."""
    if isinstance(state, dict):
        return ("dict", frozenset((k, _hashable(v)) for k, v in state.items()))
    if isinstance(state, (set, frozenset)):
        return frozenset(_hashable(s) for s in state)
    if isinstance(state, tuple):
        return tuple(_hashable(s) for s in state)
    return state


def _key(state):
    """The state itself where it can be hashed (frozensets, the common case), else its _hashable copy."""
    try:
        hash(state)
        return state
    except TypeError:
        return _hashable(state)


def _budgeted_crawl(alphabet, initial, final, follow):
    from interegular.fsm import FSM, OblivionError

    budget = current_budget()
    states, number, finals, transitions = [initial], {_key(initial): 0}, set(), {}
    i = 0
    while i < len(states):
        if budget is not None and i % 16 == 0:  # a clock read per state would cost more than the states
            budget.check(len(states))
        state = states[i]
        if final(state):
            finals.add(i)
        transitions[i] = {}
        for transition in alphabet.by_transition:
            try:
                following = follow(state, transition)
            except OblivionError:
                continue
            key = _key(following)
            if key not in number:
                number[key] = len(states)
                states.append(following)
            transitions[i][transition] = number[key]
        i += 1
    return FSM(alphabet=alphabet, states=range(len(states)), initial=0, finals=finals, map=transitions,
               __no_validation__=True)


def _spell_in_utf8(fsm, live: set, budget: Budget) -> ByteDFA:
    from interegular.fsm import anything_else

    order = sorted(live, key=lambda s: (s != fsm.initial, s))
    number = {s: i for i, s in enumerate(order)}
    rows: list[list[int]] = [[DEAD] * 256 for _ in order]
    accepting = [s in fsm.finals for s in order]
    tails: dict[tuple[int, int], int] = {}  # (target, bytes still to read) -> a state shared by all who need it

    def new_state(copy_of: int | None = None) -> int:
        rows.append(list(rows[copy_of]) if copy_of is not None else [DEAD] * 256)
        accepting.append(False)
        return len(rows) - 1

    def any_tail(target: int, remaining: int) -> int:
        """A state from which any `remaining` continuation bytes lead to target."""
        if remaining == 0:
            return target
        if (target, remaining) not in tails:
            state = new_state()
            nxt = any_tail(target, remaining - 1)
            for byte in _CONTINUATION:
                rows[state][byte] = nxt
            tails[target, remaining] = state
        return tails[target, remaining]

    def after_lead(target: int, lead: int, remaining: int) -> int:
        """The state after a lead byte: its second byte restricted if the lead says so."""
        if lead not in _SECOND:
            return any_tail(target, remaining)
        if (target, -lead) not in tails:
            state = new_state()
            for byte in _SECOND[lead]:
                rows[state][byte] = any_tail(target, remaining - 1)
            tails[target, -lead] = state
        return tails[target, -lead]

    classes: dict[int, list[str]] = {}
    for char, symbol in fsm.alphabet.items():
        if char is not anything_else:
            classes.setdefault(symbol, []).append(char)
    other = fsm.alphabet[anything_else] if anything_else in fsm.alphabet else None
    named = {c for chars in classes.values() for c in chars}
    shared = set()
    for state in order:
        budget.check(len(rows))
        here = number[state]
        targets = {symbol: number[t] for symbol, t in fsm.map.get(state, {}).items() if t in live}
        if other is not None and other in targets:  # every character the pattern does not name
            for byte in range(128):
                if chr(byte) not in named:
                    rows[here][byte] = targets[other]
            for length, leads in _LEADS.items():
                for lead in leads:
                    rows[here][lead] = after_lead(targets[other], lead, length - 1)
            shared = set(tails.values())
        for symbol, chars in classes.items():  # the characters it names, byte by byte
            if symbol in targets:
                for char in chars:
                    if 0xD800 <= ord(char) <= 0xDFFF:
                        continue  # a lone surrogate: no UTF-8 spelling, never in a valid output
                    _add_path(rows, new_state, shared, here, char.encode(), targets[symbol])
    budget.check(len(rows))
    return ByteDFA(torch.tensor(rows, dtype=torch.int64), torch.tensor(accepting), 0, len(order))


def _add_path(rows, new_state, shared: set, state: int, encoded: bytes, target: int) -> None:
    """Bytes `encoded` lead from state to target; a shared tail state on the way is copied, not changed."""
    for byte in encoded[:-1]:
        nxt = rows[state][byte]
        if nxt == DEAD:
            nxt = rows[state][byte] = new_state()
        elif nxt in shared:
            nxt = rows[state][byte] = new_state(copy_of=nxt)
        state = nxt
    rows[state][encoded[-1]] = target
