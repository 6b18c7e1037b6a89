"""A regex's automaton over characters: interegular (the parser Outlines uses) builds it; we hand it on plainly.

interegular gives a DFA (not minimised: its minimisation cost seconds on a
200-character string, and it saves only states that decoding may never
reach) whose transitions read *characters*, grouped into classes (one
class, "anything else", stands for every character the pattern does not
name). `char_dfa_of` copies it into a `CharDFA`, the plain form Task 8.1
reads. Its automaton builder (`crawl`, the one loop interegular builds every
automaton with) is replaced here by one that reads this thread's compile
budget, so that a pattern of a million states is stopped, not built.
"""

from __future__ import annotations

from dataclasses import dataclass

from miniyaie.structured.limits import current_budget


@dataclass
class CharDFA:
    """A deterministic automaton over characters. The initial state is 0.

    classes[k]: the characters class k names (characters every state treats alike).
    other: the class that also stands for every character no class names; None if a
      character no class names is refused everywhere.
    transitions[state]: {class: next state}; a class missing from the dict is refused there.
    accepting[state]: the text may end in this state.
    """

    classes: list[frozenset[str]]
    other: int | None
    transitions: list[dict[int, int]]
    accepting: list[bool]

    @property
    def num_states(self) -> int:
        return len(self.transitions)


def char_dfa_of(fsm) -> CharDFA:
    """interegular's FSM as a CharDFA: its initial state numbered 0, the others in their order."""
    from interegular.fsm import anything_else

    order = sorted(fsm.states, key=lambda s: (s != fsm.initial, s))
    number = {s: i for i, s in enumerate(order)}
    symbols = sorted(fsm.alphabet.by_transition)
    index = {symbol: k for k, symbol in enumerate(symbols)}
    classes = [frozenset(c for c in fsm.alphabet.by_transition[s] if c is not anything_else) for s in symbols]
    other = index[fsm.alphabet[anything_else]] if anything_else in fsm.alphabet else None
    transitions = [{index[symbol]: number[t] for symbol, t in fsm.map.get(s, {}).items()} for s in order]
    return CharDFA(classes, other, transitions, [s in fsm.finals for s in order])


def install_budgeted_crawl() -> None:
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
