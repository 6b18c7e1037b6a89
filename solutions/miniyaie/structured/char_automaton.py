"""A regex's automaton over characters: interegular (the parser Outlines uses) builds it; we hand it on plainly.

interegular gives a DFA (not minimised: its minimisation cost seconds on a
200-character string, and it saves only states that decoding may never
reach) whose transitions read *characters*, grouped into classes (one
class, "anything else", stands for every character the pattern does not
name). `char_dfa_of` copies it into a `CharDFA`, the plain form Task 8.1
spells in bytes. The loop interegular builds every automaton with, `crawl`,
is Task 8.1's too: ours reads this thread's compile budget, so a pattern
of a million states is stopped, not built.
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
    """Make interegular build every automaton with `crawl` below (its own takes time quadratic in the
    states and never stops for a budget). Its own is kept in ORIGINAL_CRAWL."""
    import interegular.fsm

    global ORIGINAL_CRAWL
    if not hasattr(interegular.fsm, "miniyaie_original_crawl"):  # once per process: a reloaded copy of this
        interegular.fsm.miniyaie_original_crawl = interegular.fsm.crawl  # module must not take another's for it
    ORIGINAL_CRAWL = interegular.fsm.miniyaie_original_crawl
    interegular.fsm.crawl = crawl


ORIGINAL_CRAWL = None


def _hashable(state):
    """interegular's crawl states are dicts, sets and tuples of them: a key equal exactly when they are."""
    if isinstance(state, dict):
        return ("dict", frozenset((k, _hashable(v)) for k, v in state.items()))
    if isinstance(state, (set, frozenset)):
        return frozenset(_hashable(s) for s in state)
    if isinstance(state, tuple):
        return tuple(_hashable(s) for s in state)
    return state


def key(state):
    """A hashable key for one of interegular's states, equal exactly when the states are equal."""
    try:
        hash(state)
        return state  # frozensets, the common case
    except TypeError:
        return _hashable(state)


# ANCHOR: crawl
def crawl(alphabet, initial, final, follow):
    """The deterministic automaton of every state reachable from `initial`: how interegular builds each one.

    interegular turns a regex into a DFA by combining smaller automata (a concatenation, a
    union, a repetition), and each combination is described by where it starts and how it moves;
    this function makes the automaton out of that description.
    - alphabet.by_transition: the symbols (character classes), in order.
    - initial: the start, a value (a frozenset, a tuple, sometimes a dict or set: compare states
      by equality; `key(state)` is hashable and equal exactly when the states are).
    - final(state): whether `state` accepts. follow(state, symbol): the state after reading
      `symbol`; it raises interegular.fsm.OblivionError where nothing may follow.
    Returns interegular.fsm.FSM(alphabet=alphabet, states=range(n), initial=0, finals=...,
    map=..., __no_validation__=True): number i stands for one distinct reachable state (0 for
    `initial`), finals the numbers of the accepting ones, map[i] = {symbol: number of the state it
    leads to} for every symbol that does not raise (map's keys are exactly range(n)).
    Budget: the compile's (`current_budget()`, None outside one): call budget.check(states found
    so far) at least once every 16 states found, so that a huge automaton stops early (one state
    may lead to many new ones). Work: a state seen before is recognised with a few equality tests,
    not a search through the states (the tests count them: a crawl of n states makes O(n) of them).
    """
    # Nudge: every state found must be followed exactly once: how do you know a state was seen before?
    # Hint 1: This is the subset construction's outer loop: explore from the start, give each
    #   new state a number the first time it is seen, and follow every symbol from every numbered
    #   state. A state seen again must get its old number (compare by key(state), in a dict:
    #   a list search would make the whole build quadratic), or a loop like a* never ends.
    # Hint 2: A list of states in number order, a dict key -> number. Walk the list with an
    #   index i while it grows: note state i as final if it is, and for each symbol try
    #   follow(state, symbol): skip on OblivionError; number the result if its key is new
    #   (append it, and check the budget whenever the count reaches a multiple of 16);
    #   map[i][symbol] = its number.
    # Hint 3:
    #   states = [initial]; number = {key(initial): 0}; finals = set(); transitions = {}; i = 0
    #   while i < len(states):
    #       if final(states[i]): finals.add(i)
    #       transitions[i] = {}
    #       for symbol in alphabet.by_transition:
    #           try: nxt = follow(states[i], symbol) except OblivionError: continue
    #           if key(nxt) not in number: number[key(nxt)] = len(states); states.append(nxt)
    #               if budget and len(states) % 16 == 0: budget.check(len(states))
    #           transitions[i][symbol] = number[key(nxt)]
    #       i += 1
    #   return FSM(alphabet=alphabet, states=range(len(states)), initial=0, finals=finals, map=transitions, __no_validation__=True)
    # BEGIN SOLUTION 8.1: Regex to byte automaton
    from interegular.fsm import FSM, OblivionError

    budget = current_budget()
    states, number, finals, transitions = [initial], {key(initial): 0}, set(), {}
    i = 0
    if budget is not None:
        budget.check(1)
    while i < len(states):
        state = states[i]
        if final(state):
            finals.add(i)
        transitions[i] = {}
        for symbol in alphabet.by_transition:
            try:
                following = follow(state, symbol)
            except OblivionError:
                continue
            k = key(following)
            if k not in number:
                number[k] = len(states)
                states.append(following)
                if budget is not None and len(states) % 16 == 0:  # a clock read per state costs more than it
                    budget.check(len(states))
            transitions[i][symbol] = number[k]
        i += 1
    return FSM(alphabet=alphabet, states=range(len(states)), initial=0, finals=finals, map=transitions,
               __no_validation__=True)
    # END SOLUTION
# ANCHOR_END: crawl
