"""Task 8.6: the index cache keeps indexes within its byte budget, least recently used out first, never one in use.

A stand-in compiler makes each pattern's index in no time, with a size of
its own: pattern i weighs 2**i bytes, so the bytes the cache reports say
exactly which indexes it holds. A state machine drives random gets, takes,
give_backs and failing compiles, and compares every count with a model of
the contract.
"""

import threading
import time
from collections import Counter

import pytest
from byte_vocabularies import byte_vocabulary
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from miniyaie.engine import SamplingParams
from miniyaie.structured import IndexCache, Limits, PatternError

PATTERNS = [f"p{i}" for i in range(5)]


class FakeIndex:
    def __init__(self, pattern: str):
        self.pattern, self.nbytes = pattern, 2 ** int(pattern[1:])


def fake_compiler(pattern, budget, keyword, vocabulary, model_vocab_size):
    if pattern == "bad":
        raise PatternError("bad is not a pattern")
    return FakeIndex(pattern)


class CacheMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.budget = 12  # bytes: holds p2 + p3 (4 + 8), not p4 (16) alone
        self.cache = IndexCache(byte_vocabulary(), 300, Limits(cache_bytes=self.budget), compiler=fake_compiler)
        self.order: list[str] = []  # the model: held patterns, least recently used first
        self.users: Counter[str] = Counter()
        self.compiles = self.evictions = 0
        self.story: list[str] = []

    def evict(self):
        total = sum(2 ** int(p[1:]) for p in self.order)
        for p in list(self.order):
            if total <= self.budget:
                break
            if self.users[p] == 0:
                self.order.remove(p)
                total -= 2 ** int(p[1:])
                self.evictions += 1

    def use(self, pattern: str, take: bool):
        self.story.append(f"{'take' if take else 'get'}({pattern})")
        index = (self.cache.take if take else self.cache.get)(pattern)
        assert isinstance(index, FakeIndex) and index.pattern == pattern, (
            f"Task 8.6: {'take' if take else 'get'}({pattern}) must give that pattern's index, got "
            f"{getattr(index, 'pattern', index)!r}, after {self.story}")
        compiled = pattern not in self.order
        if compiled:
            self.compiles += 1
        else:
            self.order.remove(pattern)
        self.order.append(pattern)
        if take:
            self.users[pattern] += 1
        if compiled:
            self.evict()

    @rule(pattern=st.sampled_from(PATTERNS))
    def get(self, pattern):
        self.use(pattern, take=False)

    @rule(pattern=st.sampled_from(PATTERNS))
    def take(self, pattern):
        self.use(pattern, take=True)

    @rule(pattern=st.sampled_from(PATTERNS))
    def give_back(self, pattern):
        self.story.append(f"give_back({pattern})")
        self.cache.give_back(pattern)
        if self.users[pattern] > 0:
            self.users[pattern] -= 1
        self.evict()

    @rule(take=st.booleans())
    def failing_compile(self, take):
        """A compile that raises leaves nothing behind: no index, and for a take no use (nothing to give back)."""
        self.story.append(f"{'take' if take else 'get'}(bad)")
        with pytest.raises(PatternError):
            (self.cache.take if take else self.cache.get)("bad")
        self.compiles += 1

    @invariant()
    def counts_match_the_contract(self):
        stats = self.cache.stats()
        held = sum(2 ** int(p[1:]) for p in self.order)
        assert stats["index_cache_bytes"] == held, (
            f"after {self.story}: the cache should hold {sorted(self.order)} ({held} bytes; pattern pi weighs 2**i), "
            f"it holds {stats['index_cache_bytes']} bytes ({[p for p in PATTERNS if stats['index_cache_bytes'] >> int(p[1:]) & 1]})")
        assert stats["indexes"] == len(self.order), f"after {self.story}: {len(self.order)} indexes held, stats say {stats['indexes']}"
        in_use = sum(1 for n in self.users.values() if n > 0)
        assert stats["indexes_in_use"] == in_use, (
            f"after {self.story}: {in_use} patterns in use, stats say {stats['indexes_in_use']}"
            + (" (a take whose compile failed must not count a use: nobody will give it back)" if "take(bad)" in self.story else ""))
        assert stats["compiles"] == self.compiles, f"after {self.story}: {self.compiles} compiles started, stats say {stats['compiles']}"
        assert stats["evictions"] == self.evictions, f"after {self.story}: {self.evictions} evictions, stats say {stats['evictions']}"


@pytest.mark.task("8.6")
def test_the_cache_holds_what_the_contract_says_after_any_gets_takes_and_give_backs():
    run_state_machine_as_test(CacheMachine, settings=settings(max_examples=150, stateful_step_count=30, deadline=None))


@pytest.mark.task("8.6")
def test_a_hit_makes_its_pattern_the_most_recently_used():
    cache = IndexCache(byte_vocabulary(), 300, Limits(cache_bytes=12), compiler=fake_compiler)
    for pattern in ["p3", "p2", "p3", "p0"]:
        cache.get(pattern)
    held = cache.stats()["index_cache_bytes"]
    assert held == 9, (
        f"Task 8.6: a hit makes its pattern the most recently used: after get(p3), get(p2), get(p3), get(p0) over a "
        f"12-byte cache (pi weighs 2**i) p2 is the least recently used and goes, leaving p3 and p0 (9 bytes); the cache "
        f"holds {held} bytes" + (": it evicted p3, the first compiled (first in, first out is not least recently used)"
                                 if held == 5 else ""))


@pytest.mark.task("8.6")
def test_a_compile_holds_no_lock_and_two_compiles_of_one_pattern_keep_one_index():
    """While one thread compiles, another is answered; two threads compiling one pattern get the same index."""
    both_compiling = threading.Barrier(2, timeout=10)
    answered = threading.Event()
    waited = []

    def compiler(pattern, budget, keyword, vocabulary, model_vocab_size):
        if pattern == "p1":
            both_compiling.wait()  # both threads are in here at once: neither holds the cache's lock
            waited.append(answered.wait(timeout=10))
        return FakeIndex(pattern)

    cache = IndexCache(byte_vocabulary(), 300, Limits(), compiler=compiler)
    cache.get("p0")
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.take("p1"))) for _ in range(2)]
    for t in threads:
        t.start()
    cache.get("p0")  # held: answered while p1 compiles
    answered.set()
    for t in threads:
        t.join(timeout=30)
    assert waited == [True, True], (
        "get('p0') (held) must be answered while p1 compiles in two threads: the compile must not hold the cache's lock")
    assert len(results) == 2 and results[0] is results[1], "two compiles of one pattern: both return the index the cache keeps"
    stats = cache.stats()
    assert (stats["indexes"], stats["compiles"], stats["indexes_in_use"]) == (2, 3, 1), (
        f"p0 and p1 held, 3 compiles started, p1 in use (taken twice): got {stats}")
    cache.give_back("p1")
    assert cache.stats()["indexes_in_use"] == 1, "taken twice, given back once: p1 is still in use"
    cache.give_back("p1")
    assert cache.stats()["indexes_in_use"] == 0, "taken twice, given back twice: p1 is no longer in use"


@pytest.mark.task("8.6")
def test_a_pattern_compiled_twice_at_once_is_the_most_recent_and_compiles_get_a_fresh_budget():
    """A get whose compile lost the race to another thread's still makes its pattern the most recently used."""
    from miniyaie.structured.limits import Budget

    gate, started, budgets, calls = threading.Event(), threading.Event(), [], Counter()

    def compiler(pattern, budget, keyword, vocabulary, model_vocab_size):
        budgets.append(budget)
        calls[pattern] += 1
        if pattern == "p1" and calls[pattern] == 1:
            started.set()
            gate.wait(timeout=10)
        return FakeIndex(pattern)

    limits = Limits(cache_bytes=6)  # p1 (2 bytes) and p2 (4 bytes) fit, p0 (1 byte) more does not
    cache = IndexCache(byte_vocabulary(), 300, limits, compiler=compiler)
    slow = threading.Thread(target=cache.get, args=("p1",))
    slow.start()
    assert started.wait(timeout=10), "the first get('p1') reaches the compiler"
    cache.get("p1")  # compiled again, on this thread, and kept first
    cache.get("p2")
    gate.set()
    slow.join(timeout=30)  # its get('p1') ends last: p1 is now the most recently used
    cache.get("p0")  # over the budget: the least recently used, p2, goes
    compiles = cache.stats()["compiles"]
    cache.get("p1")
    assert cache.stats()["compiles"] == compiles, (
        "the slower of two compiles of p1 ended after get('p2'), so p1 was the most recently used and p2 had to go "
        "when p0 came: p1 was evicted instead")
    assert all(isinstance(b, Budget) and b.limits == limits for b in budgets), (
        f"get with no budget compiles with a fresh Budget(limits) of the cache's limits, the compiler got {budgets}")

@pytest.mark.task("8.6")
def test_each_compile_gets_its_own_budget_whose_deadline_starts_with_that_compile():
    """A server compiles for hours: a budget made once (with the cache, or at its first compile) runs out for all."""
    budgets = []

    def compiler(pattern, budget, keyword, vocabulary, model_vocab_size):
        budgets.append(budget)
        budget.check()  # past its deadline: the PatternError "took longer than the compile budget"
        return FakeIndex(pattern)

    cache = IndexCache(byte_vocabulary(), 300, Limits(compile_seconds=0.5), compiler=compiler)
    cache.get("p1")
    time.sleep(0.7)  # the first compile's deadline has passed
    for call, pattern in ((cache.get, "p2"), (cache.take, "p3")):
        try:
            call(pattern)
        except PatternError as exc:
            pytest.fail(f"Task 8.6: {call.__name__}({pattern!r}) with no budget, 0.7 s after the first compile, was refused "
                        f"({exc}): each compile gets a fresh Budget(limits), whose deadline (compile_seconds=0.5) starts "
                        f"with that compile, not one budget for every compile of the cache")
    assert len(set(map(id, budgets))) == 3, (
        f"Task 8.6: three compiles with no budget given must get three Budget objects, got {len(set(map(id, budgets)))}")


HELD = [r"[ab]x", r"[ab]y"]


class HoldsMachine(RuleBasedStateMachine):
    """Constraints over a cache of 1 byte: an index nobody uses is dropped at once, so every compile counted
    says whether each use was given back exactly once (a leaked use keeps an index; an extra give-back
    drops one a guide still reads, and the next use compiles it again)."""

    def __init__(self):
        super().__init__()
        from miniyaie.structured import Constraints

        self.c = Constraints(byte_vocabulary([]), 300, Limits(cache_bytes=1))
        self.uses: Counter[str] = Counter()
        self.holds: Counter[str] = Counter()
        self.guides: dict[str, str] = {}
        self.compiles = 0
        self.story: list[str] = []

    def need(self, pattern: str):
        if self.uses[pattern] == 0:
            self.compiles += 1
        self.uses[pattern] += 1

    def forget_model(self, rid: str):
        if rid in self.guides:
            self.uses[self.guides.pop(rid)] -= 1

    @rule(pattern=st.sampled_from(HELD))
    def prepare(self, pattern):
        self.story.append(f"prepare({pattern})")
        self.c.prepare(SamplingParams(regex=pattern))
        self.need(pattern)
        self.holds[pattern] += 1

    @rule(pattern=st.sampled_from(HELD))
    def release(self, pattern):
        self.story.append(f"release({pattern})")
        self.c.release(SamplingParams(regex=pattern))
        if self.holds[pattern] > 0:
            self.holds[pattern] -= 1
            self.uses[pattern] -= 1

    @rule(pattern=st.sampled_from(HELD), ids=st.lists(st.sampled_from(["r1", "r2", "r3"]), min_size=1, max_size=2, unique=True))
    def start(self, pattern, ids):
        self.story.append(f"start({ids}, {pattern})")
        self.c.start(ids, SamplingParams(regex=pattern))
        held = self.holds[pattern] > 0
        if held:
            self.holds[pattern] -= 1
        for rid in ids:
            self.need(pattern)  # the new guide's use first: a restarted id never drops the index it reads
            self.forget_model(rid)
            self.guides[rid] = pattern
        if held:
            self.uses[pattern] -= 1

    @rule(rid=st.sampled_from(["r1", "r2", "r3", "r4"]))
    def forget(self, rid):
        self.story.append(f"forget({rid})")
        self.c.forget(rid)
        self.forget_model(rid)

    @invariant()
    def every_use_is_given_back_once(self):
        stats = self.c.stats()
        in_use = sorted(p for p, n in self.uses.items() if n > 0)
        assert stats["compiles"] == self.compiles, (
            f"after {self.story}: {self.compiles} compiles expected, {stats['compiles']} happened (an index dropped "
            f"while a guide or hold used it compiles again; a prepared index is used by start without compiling; "
            f"an id started again gives its old guide's use back only after its new guide took one)")
        assert stats["indexes_in_use"] == len(in_use), (
            f"after {self.story}: patterns in use (by guides or holds) {in_use}, the cache counts {stats['indexes_in_use']}")
        for rid in ["r1", "r2", "r3", "r4"]:
            assert (rid in self.c.guides) == (rid in self.guides), f"after {self.story}: {rid} should {'' if rid in self.guides else 'not '}have a guide"


@pytest.mark.task("8.6")
def test_guides_and_prepared_holds_give_back_each_use_of_an_index_once():
    from miniyaie.structured import Constraints

    c = Constraints(byte_vocabulary([]), 300, Limits(cache_bytes=1))
    c.start(["r0"], SamplingParams())  # unconstrained: nothing to hold, nothing to compile
    assert "r0" not in c.guides and c.stats()["compiles"] == 0, f"an unconstrained start makes no guide and compiles nothing: {c.stats()}"
    c.start(["r1"], SamplingParams(regex="ab"))
    c.start(["r1"], SamplingParams(regex="ab"))  # a restart of r1: its old guide was the index's only use
    assert c.stats()["compiles"] == 1 and c.stats()["indexes_in_use"] == 1, (
        f"start(['r1']) twice with one pattern, over a cache that keeps nothing unused: r1's new guide must take its "
        f"use before the old one is given back (1 compile, 1 index in use), got {c.stats()}")
    c.forget("r1")
    run_state_machine_as_test(HoldsMachine, settings=settings(max_examples=60, stateful_step_count=20, deadline=None))
