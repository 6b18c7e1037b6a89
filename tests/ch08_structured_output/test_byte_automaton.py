"""Task 8.1: from a regex to the byte automaton: the crawl that builds each automaton, the live states, UTF-8.

The oracle is the definition, read with Python's own UTF-8 decoder: a byte
string is alive in the byte automaton exactly when its complete characters
walk the character automaton on live states and its unfinished tail (a
token may stop inside a character) begins some character that would be
read next. Random character automata draw named characters of one to four
bytes, ranges across a UTF-8 length boundary, characters that share their
first bytes, lone surrogates and "any other character"; random byte
strings draw stray continuation bytes, overlong forms, surrogates and
bytes past U+10FFFF. The crawl is checked against interegular's own, and
on states that cannot be hashed.
"""

import codecs
import re

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from miniyaie.structured import DEAD, CharDFA, PatternError, compile_regex, live_states, spell_in_utf8
from miniyaie.structured.limits import Budget, Limits, running_under

# Characters of 1 to 4 bytes, boundaries of each length, characters that share first bytes (è é, 東 杰, 😀 😁).
POOL = ["a", "b", '"', "\x00", "\x7f", "\x80", "è", "é", "ß", "\u07ff", "\u0800", "東", "杰", "\ud7ff", "\ue000",
        "\uffff", "\U00010000", "😀", "😁", "\U0010ffff"]
SURROGATE = "\ud800"
# Whole ranges: across 1->2, 2->3 and 3->4 bytes, around the surrogates (which UTF-8 cannot write), all of C3.
RANGES = [(0x70, 0x90), (0x7F8, 0x808), (0xFFF8, 0x10008), (0xD7FC, 0xE004), (0xC0, 0xFF)]
BYTES = [0x00, ord("a"), ord('"'), 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xA9, 0xBF, 0xC0, 0xC1, 0xC2, 0xC3, 0xDF,
         0xE0, 0xE6, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF]


def brute_live(chars: CharDFA) -> set[int]:
    """Live states by fixpoint: accepting, or a transition on a class UTF-8 can write into a live state."""
    usable = {k for k, c in enumerate(chars.classes) if k == chars.other or any(not 0xD800 <= ord(x) <= 0xDFFF for x in c)}
    live = {s for s, a in enumerate(chars.accepting) if a}
    while True:
        more = {s for s, moves in enumerate(chars.transitions) if any(k in usable and t in live for k, t in moves.items())}
        if more <= live:
            return live
        live |= more


def class_of(chars: CharDFA, char: str) -> int | None:
    return next((k for k, c in enumerate(chars.classes) if char in c), chars.other)


def char_walk(chars: CharDFA, live: set[int], text: str) -> int | None:
    """The character state `text` leads to from 0, or None where it is refused or leaves `live`."""
    state = 0
    for char in text:
        k = class_of(chars, char)
        state = chars.transitions[state].get(k) if k is not None else None
        if state is None or state not in live:
            return None
    return state


def interval(tail: bytes) -> tuple[int, int] | None:
    """The code points whose UTF-8 begins with `tail` (one unfinished character): a contiguous range, or None."""
    need = 2 if tail[0] < 0xE0 else 3 if tail[0] < 0xF0 else 4
    found = []
    for b in range(0x80, 0xC0):
        rest = need - len(tail) - 1
        try:
            found.append((ord((tail + bytes([b]) + b"\x80" * rest).decode()), ord((tail + bytes([b]) + b"\xbf" * rest).decode())))
        except UnicodeDecodeError:
            continue
    return (min(f[0] for f in found), max(f[1] for f in found)) if found else None


def viable(chars: CharDFA, live: set[int], data: bytes) -> bool:
    """Whether `data` begins the UTF-8 spelling of some text the character automaton reads (the definition)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(data, final=False)
    except UnicodeDecodeError:
        return False
    tail = decoder.getstate()[0]
    state = char_walk(chars, live, text)
    if state is None:
        return False
    if not tail:
        return True
    span = interval(tail)
    if span is None:
        return False
    moves = chars.transitions[state]
    named = {c for cls in chars.classes for c in cls if not 0xD800 <= ord(c) <= 0xDFFF}
    if any(c.encode().startswith(tail) and moves.get(class_of(chars, c)) in live for c in named):
        return True
    unnamed = (span[1] - span[0] + 1) - sum(span[0] <= ord(c) <= span[1] for c in named)
    return chars.other is not None and moves.get(chars.other) in live and unnamed > 0


def byte_walk(table: torch.Tensor, data: bytes) -> int:
    state = 0
    for byte in data:
        state = int(table[state, byte])
        if state == DEAD:
            return DEAD
    return state


def dead_ends(table: torch.Tensor, accepting: torch.Tensor) -> set[int]:
    live = set(accepting.nonzero().flatten().tolist())
    while True:
        more = {s for s in range(len(table)) if any(int(t) in live for t in table[s] if t != DEAD)}
        if more <= live:
            return set(range(len(table))) - live
        live |= more


@st.composite
def char_automata(draw):
    states = draw(st.integers(1, 4))
    members = draw(st.lists(st.sampled_from(POOL + [SURROGATE]), max_size=8, unique=True))
    for low, high in draw(st.lists(st.sampled_from(RANGES), max_size=1)):
        members += [chr(c) for c in range(low, high + 1) if chr(c) not in members]
    num_classes = draw(st.integers(1, 3))
    classes = [set() for _ in range(num_classes)]
    for char in members:
        k = draw(st.integers(-1, num_classes - 1))
        if k >= 0:
            classes[k].add(char)
    other = draw(st.sampled_from([None, *range(num_classes)]))
    transitions = [{k: t for k in range(num_classes) if (t := draw(st.sampled_from([None, *range(states)]))) is not None}
                   for _ in range(states)]
    accepting = draw(st.lists(st.booleans(), min_size=states, max_size=states))
    return CharDFA([frozenset(c) for c in classes], other, transitions, accepting)


@st.composite
def byte_strings(draw, chars: CharDFA):
    named = sorted({c for cls in chars.classes for c in cls if c != SURROGATE and not 0xD800 <= ord(c) <= 0xDFFF})
    pieces = st.one_of(st.sampled_from(named or POOL).map(str.encode), st.sampled_from(POOL).map(str.encode),
                       st.sampled_from(BYTES).map(lambda b: bytes([b])))
    data = b"".join(draw(st.lists(pieces, max_size=6)))
    return data[:draw(st.integers(0, len(data)))] if draw(st.booleans()) else data


def check(chars: CharDFA, datas: list[bytes], must_match_something: bool = False) -> None:
    live = brute_live(chars)
    assert 0 in live or not must_match_something, "the example's character automaton must match something"
    if 0 not in live:
        return
    dfa = spell_in_utf8(chars, live, Budget(Limits()))
    table, accepting = dfa.next_state, dfa.accepting
    assert table.dtype == torch.int64 and table.shape[1] == 256, f"next_state is [S, 256] int64, got {tuple(table.shape)} {table.dtype}"
    assert dfa.initial == 0 and dfa.char_states == len(live), f"initial 0 and char_states {len(live)} (the live states), got {dfa.initial}, {dfa.char_states}"
    order = sorted(live)
    assert accepting[:len(live)].tolist() == [chars.accepting[s] for s in order], "the character states keep their accepting flags, in order"
    assert not accepting[len(live):].any(), "a state inside a character never accepts"
    assert not dead_ends(table, accepting), f"states {sorted(dead_ends(table, accepting))[:8]} can reach no accepting state"
    for data in datas:
        for cut in range(len(data) + 1):
            state, want = byte_walk(table, data[:cut]), viable(chars, live, data[:cut])
            assert (state != DEAD) == want, (
                f"Task 8.1: the bytes {data[:cut].hex(' ') or '(none)'} {'die' if want else 'are alive'} in the byte "
                f"automaton, but they {'begin' if want else 'do not begin'} the UTF-8 of a text the character automaton "
                f"reads. The character automaton: {str(chars)[:300]}")
        try:
            text = data.decode()
        except UnicodeDecodeError:
            continue
        end = char_walk(chars, live, text)
        if end is not None:
            assert byte_walk(table, data) == order.index(end), (
                f"Task 8.1: the bytes of a text must end in the byte state of the character state the text leads to: "
                f"{text!r} leads to character state {end}, so byte state {order.index(end)}; its bytes "
                f"{data.hex(' ')} end in {byte_walk(table, data)}. The character automaton: {str(chars)[:300]}")


# Class 1 is `other`, naming no character: [^é] is one character, not é, then the end.
EURO = CharDFA([frozenset("é"), frozenset()], 1, [{1: 1}, {}], [False, True])
WIDE = CharDFA([frozenset(chr(c) for c in range(0x7F8, 0x809)), frozenset("😀")], None, [{0: 1, 1: 1}, {}], [False, True])
C3 = CharDFA([frozenset(chr(c) for c in range(0xC0, 0x100)), frozenset()], 1, [{1: 1}, {}], [False, True])  # not U+00C0..U+00FF


def cases():
    return char_automata().flatmap(lambda chars: st.tuples(st.just(chars), st.lists(byte_strings(chars), max_size=6)))


@pytest.mark.task("8.1")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
@example(case=(EURO, ["é".encode(), "è".encode(), b"a", b"\xc3", b"\xc3\xa8"]))
@example(case=(WIDE, ["\u07f8".encode(), "\u0808".encode(), "\u0809".encode(), "😀".encode(), b"\xf0\x9f\x98",
                      b"\xf0\x9f\x98\x81", b"\xe0\xa0", b"\xdf\xb8"]))
@example(case=(C3, [b"\xc3", "é".encode(), "ÿ".encode(), "Ā".encode(), b"\xc2\xbf", b"\x80", b"\xc0\xaf",
                    b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf5\x80", b"\xed\x9f\xbf", b"\xff"]))
def test_the_byte_automaton_reads_exactly_the_utf8_of_what_the_character_automaton_reads(case):
    chars, datas = case
    check(chars, datas, must_match_something=chars in (EURO, WIDE, C3))


@pytest.mark.task("8.1")
@settings(max_examples=200, deadline=None)
@given(chars=char_automata())
@example(chars=CharDFA([frozenset("a")], None, [{0: 1}, {}, {0: 2}], [False, True, False]))
@example(chars=CharDFA([frozenset(SURROGATE), frozenset("a")], None, [{0: 1, 1: 2}, {}, {}], [False, True, False]))
def test_live_states_are_those_that_reach_an_accepting_state(chars):
    want = brute_live(chars)
    got = live_states(chars)
    assert set(got) == want, (
        f"Task 8.1: live_states must be the states that reach an accepting state through classes UTF-8 can write: "
        f"{sorted(want)}, got {sorted(got)}. The character automaton: {str(chars)[:300]}")


@pytest.mark.task("8.1")
def test_live_states_of_a_long_chain_come_back():
    """20,000 states in a chain (max_states): a search per state would walk 2 * 10^8 edges."""
    n = 20_000
    chars = CharDFA([frozenset("a")], None, [{0: s + 1} for s in range(n - 1)] + [{}], [False] * (n - 1) + [True])
    assert live_states(chars) == set(range(n)), "every state of the chain reaches its accepting end"


def nested(depth: int) -> st.SearchStrategy[str]:
    atoms = st.one_of(
        st.sampled_from(["a", "b", "é", "東", "😀", "ß"]),
        st.lists(st.sampled_from(["a", "é", "è", "東", "杰", "😀", "😁", "\x7f", "\x80"]), min_size=1, max_size=4, unique=True)
        .flatmap(lambda cs: st.sampled_from(["[" + "".join(cs) + "]", "[^" + "".join(cs) + "]"])),
        st.sampled_from(["[p-\x90]", "[\u07fa-\u0805]", "[\ufffa-\U00010005]", "[^\x00-\x7f]", "[^a-z]"]))
    if depth == 0:
        return atoms
    inner = nested(depth - 1)
    return st.one_of(atoms, st.tuples(inner, inner).map("".join), st.tuples(inner, inner).map(lambda t: f"({t[0]}|{t[1]})"),
                     inner.map(lambda r: f"({r})?"), inner.map(lambda r: f"({r})*"), inner.map(lambda r: f"({r}){{1,2}}"))


@pytest.mark.task("8.1")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=nested(2), texts=st.lists(st.text(st.sampled_from(POOL + ["p", "\x90", "\u0800", "\U00010004", "z"]), max_size=5), max_size=8))
@example(pattern="[^é]", texts=["é", "è", "e"])
@example(pattern="[\u07fa-\u0805]+", texts=["\u07fa\u0805", "\u0806", "\u07ff\u0800"])
@example(pattern="[^\x00-\x7f]😀", texts=["é😀", "a😀", "😀😀", "\U0010ffff😀"])
def test_a_regex_matches_exactly_the_strings_whose_utf8_the_byte_automaton_accepts(pattern, texts):
    dfa = compile_regex(pattern)
    for text in texts:
        state = byte_walk(dfa.next_state, text.encode())
        accepted = state != DEAD and bool(dfa.accepting[state])
        want = re.fullmatch(pattern, text) is not None
        assert accepted == want, (
            f"Task 8.1: the byte automaton {'refuses' if want else 'accepts'} {text!r} ({text.encode().hex(' ') or 'no bytes'}), "
            f"which the regex {'matches' if want else 'does not match'} (re.fullmatch). The regex: {pattern!r}")


@pytest.mark.task("8.1")
def test_any_character_shares_its_intermediate_states():
    """The sizes the contract names: one state reading any character but '"' back to itself at most 10 byte states
    (7 inside characters is the fewest UTF-8 allows), a chain of 100 any-character states at most 1,000."""
    not_quote = CharDFA([frozenset('"'), frozenset()], 1, [{1: 0}], [True])  # [^"]* as one character state
    loop = spell_in_utf8(not_quote, {0}, Budget(Limits()))
    assert len(loop.next_state) <= 10, (
        f"Task 8.1: one character state that reads any character but '\"' back to itself must take at most 10 byte "
        f"states (the states inside a character shared), got {len(loop.next_state)}")
    n = 100
    chars = CharDFA([frozenset()], 0, [{0: s + 1} for s in range(n)] + [{}], [True] * (n + 1))
    dfa = spell_in_utf8(chars, set(range(n + 1)), Budget(Limits()))
    assert len(dfa.next_state) <= 10 * (n + 1), (
        f"Task 8.1: {n + 1} character states that each read any character must take at most {10 * (n + 1)} byte "
        f"states, got {len(dfa.next_state)}")


class Recording(Budget):
    def __init__(self, limits):
        super().__init__(limits)
        self.seen = []

    def check(self, states: int = 0) -> None:
        self.seen.append(states)
        super().check(states)


def refused_by_max_states_100(alphabet, follow, states: str) -> Recording:
    """Crawl from (0,) with `follow` under max_states=100; fail unless the budget refuses it by name. The budget
    comes back: its `seen` holds the counts the crawl checked."""
    from miniyaie.structured.char_automaton import crawl

    small = Recording(Limits(max_states=100))
    try:
        with running_under(small):
            crawl(alphabet, (0,), lambda state: False, follow)
    except PatternError as exc:
        assert "max_states" in str(exc), f"Task 8.1: the budget's refusal names max_states: got {exc}"
    else:
        pytest.fail(f"Task 8.1: a crawl of {states} states under max_states=100 must stop with the budget's "
                    f"PatternError (budget.check(states found so far) at least once every 16 states while it runs): "
                    f"it finished, the counts checked were {small.seen}")
    return small


@pytest.mark.task("8.1")
def test_the_budget_is_checked_as_states_are_made_and_stops_the_build():
    n = 100
    chars = CharDFA([frozenset()], 0, [{0: s + 1} for s in range(n)] + [{}], [True] * (n + 1))
    budget = Recording(Limits())
    spell_in_utf8(chars, set(range(n + 1)), budget)
    assert len(budget.seen) >= n + 1, f"budget.check is called at least once per character state ({n + 1}), got {len(budget.seen)} calls"
    assert max(budget.seen) >= n + 1, f"budget.check gets the number of states made so far: the largest count seen was {max(budget.seen)}"
    small = Recording(Limits(max_states=300))
    with pytest.raises(PatternError, match="max_states"):
        spell_in_utf8(chars, set(range(n + 1)), small)
    assert max(small.seen) <= 300 + 300, f"the build stops soon after passing max_states=300, not at {max(small.seen)} states"
    loop = CharDFA([frozenset()], 0, [{0: 0}], [True])  # any character, any number of times: 1 character state
    whole = spell_in_utf8(loop, {0}, Recording(Limits()))
    assert len(whole.next_state) > 3, f"reading any character takes more byte states than 3, got {len(whole.next_state)}"
    tiny = Recording(Limits(max_states=3))
    with pytest.raises(PatternError, match="max_states"):
        spell_in_utf8(loop, {0}, tiny)
        raise AssertionError(f"{len(whole.next_state)} byte states with max_states=3: the check of the total must refuse it "
                             f"(budget.check saw only {tiny.seen})")


def build(pattern: str, crawler):
    """interegular's character automaton of `pattern`, every automaton on the way built by `crawler`."""
    import interegular
    import interegular.fsm

    saved = interegular.fsm.crawl
    interegular.fsm.crawl = crawler
    try:
        return interegular.parse_pattern(pattern).to_fsm()
    finally:
        interegular.fsm.crawl = saved


@pytest.mark.task("8.1")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=nested(2), texts=st.lists(st.text(st.sampled_from(["a", "b", "é", "東", "😀", "p", "z"]), max_size=5), max_size=6))
@example(pattern="(a|b)*a(a|b){3}", texts=["aaaa", "babab", "b"])
@example(pattern="(ab)*", texts=["", "ab", "aba", "abab"])
def test_the_crawl_builds_the_automaton_interegular_builds(pattern, texts):
    from miniyaie.structured import char_automaton

    char_automaton.install_budgeted_crawl()
    ours, theirs = build(pattern, char_automaton.crawl), build(pattern, char_automaton.ORIGINAL_CRAWL)
    assert len(ours.states) == len(theirs.states), (
        f"Task 8.1: crawl must number each reachable state once: interegular's own crawl finds "
        f"{len(theirs.states)} distinct states, ours {len(ours.states)}. The regex: {pattern!r}")
    for text in texts:
        assert ours.accepts(text) == theirs.accepts(text), (
            f"Task 8.1: the crawled automaton {'accepts' if ours.accepts(text) else 'refuses'} {text!r}, which "
            f"interegular's own crawl {'accepts' if theirs.accepts(text) else 'refuses'}. The regex: {pattern!r}")


@pytest.mark.task("8.1")
def test_the_crawl_knows_an_unhashable_state_seen_before_and_reads_the_budget():
    from interegular.fsm import Alphabet, OblivionError

    from miniyaie.structured.char_automaton import crawl

    alphabet = Alphabet.from_groups({"a"}, {"b"})  # symbols 0 and 1

    def follow(state, symbol):  # states are dicts: {"n": k}, k in 0..4; symbol 1 dies after 3
        if symbol == 1 and state["n"] >= 3:
            raise OblivionError
        return {"n": (state["n"] + 1 + symbol) % 5}

    budget = Recording(Limits(max_states=1000))
    with running_under(budget):
        fsm = crawl(alphabet, {"n": 0}, lambda state: state["n"] == 4, follow)
    assert len(fsm.states) == 5 and fsm.initial == 0, f"five distinct dict states, the first numbered 0: got {len(fsm.states)}"

    def walk(symbols):
        state = 0
        for symbol in symbols:
            state = fsm.map[state][symbol]
        return state

    assert walk([0, 0, 0, 0]) in fsm.finals and walk([1, 0]) not in fsm.finals and walk([1, 1]) in fsm.finals, (
        "aaaa and bb reach n=4 (accepting), ba does not")
    assert set(fsm.map) == set(range(5)) and fsm.finals <= set(range(5)), (
        f"map and finals hold the numbers 0..4 only: got map keys {sorted(fsm.map)}, finals {sorted(fsm.finals)}")
    assert walk([0] * 9) in fsm.finals and walk([0] * 5) == 0, (
        "nine a's go round the cycle back through the start ({'n': 0}, number 0) to n=4: a state seen again keeps its number")
    n3 = walk([0, 0, 0])
    assert set(fsm.map[n3]) == {0}, f"from n=3 only symbol 0 may follow (1 raises OblivionError): got {fsm.map[n3]}"
    assert budget.seen, "the crawl reads the compile's budget (current_budget()) while it runs"

    def long(state, symbol):  # a chain of 3,001 states, far past max_states=100
        if state[0] >= 3000:
            raise OblivionError
        return (state[0] + 1,)

    small = refused_by_max_states_100(alphabet, long, "3,001")
    assert max(small.seen) <= 100 + 2 * 16 + 2, f"the crawl stops within 16 states of max_states=100, it reached {max(small.seen)}"
    gaps = [later - earlier for earlier, later in zip(small.seen, small.seen[1:])]
    assert max(gaps) <= 16, (
        f"each state here finds one new state: checks at least once every 16 states found are at most 16 apart, "
        f"the counts checked were {small.seen}")


class Counted:
    """A crawl state that counts the equality tests made on it (a list search makes one per state it passes)."""

    compared = 0

    def __init__(self, n: int):
        self.n = n

    def __eq__(self, other) -> bool:
        Counted.compared += 1
        return isinstance(other, Counted) and other.n == self.n

    def __hash__(self) -> int:
        return hash(self.n)


@pytest.mark.task("8.1")
def test_the_crawl_recognises_a_state_seen_before_without_searching_the_states():
    from interegular.fsm import Alphabet

    from miniyaie.structured.char_automaton import crawl

    size = 3000

    def follow(state, symbol):  # a ring of `size` states on symbol 0, and back to the start on symbol 1
        return Counted((state.n + 1) % size if symbol == 0 else 0)

    Counted.compared = 0
    fsm = crawl(Alphabet.from_groups({"a"}, {"b"}), Counted(0), lambda state: state.n == size - 1, follow)
    assert len(fsm.states) == size, f"Task 8.1: a ring of {size} states: the crawl numbered {len(fsm.states)}"
    assert Counted.compared <= 10 * size, (
        f"Task 8.1: the crawl made {Counted.compared:,} equality tests between states to number {size:,} states "
        f"({2 * size:,} lookups); at most {10 * size:,} are needed: a state seen before must be found by its key "
        f"(a dict), not by a search through the states found so far (quadratic: the build of a large pattern "
        f"would take minutes)")


@pytest.mark.task("8.1")
def test_the_crawl_checks_the_budget_every_16_states_found_even_when_one_state_finds_many():
    from interegular.fsm import Alphabet, OblivionError

    from miniyaie.structured.char_automaton import crawl

    alphabet = Alphabet.from_groups(*({chr(0x100 + i)} for i in range(40)))  # 40 symbols

    made = []

    def wide(state, symbol):  # a tree: each state leads to 40 new ones, each made once
        if state[0] >= 10_000:
            raise OblivionError
        made.append(state[0] * 40 + symbol + 1)
        return (made[-1],)

    small = refused_by_max_states_100(alphabet, wide, "10,000")
    assert 1 + len(made) <= 100 + 16, (
        f"Task 8.1: the crawl had found {1 + len(made):,} states when the budget refused it (max_states=100): the "
        f"count it checks is the states found, at least once every 16 of them, so it stops within 16 states of the "
        f"cap; here each state followed finds 40 new ones, and the counts checked were {small.seen[:8]}")
    def nothing(state, symbol):
        raise OblivionError

    try:
        with running_under(Recording(Limits(max_states=1))):
            one = crawl(alphabet, (0,), lambda state: True, nothing)
    except PatternError as exc:
        pytest.fail(f"Task 8.1: an automaton of one state under max_states=1 was refused ({exc}): the count checked is "
                    f"the states found so far, and one state is not over a cap of one")
    assert len(one.states) == 1, f"Task 8.1: a start nothing follows is an automaton of one state, got {len(one.states)}"
    gaps = [later - earlier for earlier, later in zip([0] + small.seen, small.seen)]
    assert max(small.seen) <= 100 + 16 and max(gaps) <= 16, (
        f"Task 8.1: check the budget at least once every 16 states found, not every 16 states followed: here each "
        f"state leads to 40 new ones, and the crawl checked at the counts {small.seen[:8]} (stop within 16 states "
        f"of max_states=100)")
