"""Task 2.3: PagedMemory, the scheduler's KV memory on blocks.

The contract the scheduler relies on holds for any KVMemory, so the same
state machine also runs on chapter 1's TokenCountingMemory (ungraded). The
paged machine adds what only blocks have: block tables sized exactly,
ref counts that match the tables, forks that share blocks, and a model of
the pool's contents that copy-on-write must keep intact for every owner.
"""

import contextlib
import itertools
from collections import Counter

import pytest
import torch
import hypothesis.internal.conjecture.engine as hypothesis_engine
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from miniyaie.model import ModelConfig
from miniyaie.paged import OutOfBlocksError, PagedMemory, copy_blocks, make_pool
from miniyaie.scheduler import Request, TokenCountingMemory
from refusals import refused


MACHINE_SETTINGS = settings(max_examples=200, stateful_step_count=50)
TINY = ModelConfig(
    family="llama", vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=2, num_heads=4,
    num_kv_heads=2, head_dim=4, rms_norm_eps=1e-6, max_position_embeddings=64, rope_theta=10000.0,
)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def copied_from(before: list[int], after: list[int]) -> dict[int, int]:
    """The blocks an allocate put in a table in place of others (its copy-on-write copies): new block -> old block."""
    return {new: old for old, new in zip(before, after) if new != old}


def copies_of_copies(waiting: dict[int, int], table: list[int], reader: str, copies: list[tuple[int, int]]) -> str:
    """For a failure message: the queued copies into `table` recorded from a block that was itself waiting for its copy.

    `waiting` maps every block given out as a copy since the last step to the block it was copied from."""
    stories = []
    for src, dst in copies:
        if dst in table and src in waiting:
            root = src
            while root in waiting:  # follow the chain to the block that holds the K/V
                root = waiting[root]
            stories.append(
                f"a copy recorded from a block that is itself waiting for its copy: the queue {copies} copies block "
                f"{src} into {reader!r}'s block {dst}, but block {src} is a copy given out in the same step, still "
                f"waiting for the K/V of block {waiting[src]}. copy_blocks reads every source as it was before the "
                f"call, so {reader!r} reads what block {src} held before it was filled; the K/V it shares are in "
                f"block {root}"
            )
    return "; ".join(stories)


def assert_no_copy_into_a_block_without_owner(memory: PagedMemory, copies: list[tuple[int, int]], after: str) -> None:
    """Rule (1) of free's contract, on the queue a free left: no queued copy writes into a block nobody owns."""
    ownerless = [(src, dst) for src, dst in copies if memory.allocator.ref_count(dst) == 0]
    assert not ownerless, (
        f"Task 2.3: the queue of copies writes into a block that has no owner: {ownerless} of {copies} queued after {after}; "
        "rule (1) of free's contract: the queue holds no copy into a block that has no owner (it may be handed out "
        "again before the step, and the copy would overwrite its next owner's K/V)"
    )


def assert_no_copy_lands_twice_or_on_a_new_owner(copies: list[tuple[int, int]], fresh: set[int], after: str) -> None:
    """The queue taken after a free and a later allocation: each destination once, none a block just handed out fresh."""
    twice = sorted(dst for dst, count in Counter(dst for _, dst in copies).items() if count > 1)
    assert not twice, (
        f"Task 2.3: the queue of copies writes twice into block(s) {twice}: {copies}, taken after {after} and a later "
        "allocation. One of those copies was queued for a request that was freed; its block was handed to another "
        "request since, which gets the K/V of a block it never shared"
    )
    landing = [(src, dst) for src, dst in copies if dst in fresh]
    assert not landing, (
        f"Task 2.3: the queue of copies {copies}, taken after {after} and a later allocation, writes {landing} into block(s) "
        "that allocation took fresh: the copy was queued for the freed request, and the block's new owner gets K/V "
        "it never shared"
    )


class KVMemoryContract(RuleBasedStateMachine):
    """What the scheduler relies on: can_allocate says exactly whether allocate succeeds,
    a refused allocation changes nothing, and free gives everything back."""

    def __init__(self):
        super().__init__()
        self.memory = None
        self.requests: dict[str, Request] = {}
        self.held: dict[str, int] = {}  # request id -> tokens its memory must hold (largest allocation since its last free)
        self.ids = itertools.count()

    # -- what differs between implementations
    def make_memory(self, num_blocks: int, block_size: int):
        raise NotImplementedError

    def used(self) -> int:
        raise NotImplementedError

    def expected_fit(self, request: Request, num_new_tokens: int) -> bool:
        raise NotImplementedError

    fit_detail = ""  # the state behind expected_fit's answer, for can_allocate's message
    snapshot_legend = ""  # what snapshot's fields are

    def snapshot(self):
        return self.used()

    def after_step(self, request: Request, num_new_tokens: int) -> None:
        pass

    def forget(self, request: Request) -> None:
        pass

    def after_allocate(self) -> None:
        pass

    def allocated(self, request: Request, before) -> None:
        """Called right after a successful allocate, with the snapshot taken before it."""

    # -- rules
    @initialize(num_blocks=st.integers(1, 8), block_size=st.sampled_from([1, 2, 3, 7, 16]))
    def make(self, num_blocks, block_size):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.capacity = num_blocks * block_size
        self.memory = self.make_memory(num_blocks, block_size)

    def add(self, request: Request) -> None:
        self.requests[request.request_id] = request
        self.held[request.request_id] = 0

    def pick(self, i: int) -> Request:
        return list(self.requests.values())[i % len(self.requests)]

    @rule(prompt_len=st.integers(1, 40))
    def new_request(self, prompt_len):
        self.add(Request(f"r{next(self.ids)}", [1] * prompt_len, max_tokens=8))

    @precondition(lambda self: self.requests)
    @rule(i=st.integers(0, 10**6), n=st.one_of(st.integers(0, 3), st.integers(0, 24)), run=st.booleans())
    def allocate(self, i, n, run):
        self._allocate(self.pick(i), n, run)

    @precondition(lambda self: self.requests)
    @rule(i=st.integers(0, 10**6))
    def decode(self, i):
        """The commonest step: one more token."""
        self._allocate(self.pick(i), 1, run=True)

    def _allocate(self, request: Request, n: int, run: bool, copies_now: bool = True) -> None:
        before = self.snapshot()
        fits = self.memory.can_allocate(request, n)
        assert self.snapshot() == before, "Task 2.3: can_allocate only asks"
        expected = self.expected_fit(request, n)
        assert fits == expected, (
            f"Task 2.3: can_allocate said {'yes' if fits else 'no'} for {request.request_id} + {n} tokens, but "
            + ("the pool cannot hold them: the scheduler would admit the request and allocate would then refuse it"
               if fits else "the pool can hold them: the scheduler would leave the request waiting for nothing")
            + self.fit_detail
        )
        if not fits:
            refused(MemoryError, lambda: self.memory.allocate(request, n),
                    f"Task 2.3: allocate({request.request_id}, {n}) must raise OutOfBlocksError (a MemoryError) when "
                    "can_allocate says no")
            after = self.snapshot()
            assert after == before, (
                f"Task 2.3: a refused allocation changes nothing, but allocate({request.request_id}, {n}) was refused and "
                f"changed the memory from {before} to {after}" + self.snapshot_legend
            )
            return
        self.memory.allocate(request, n)
        self.allocated(request, before)
        rid = request.request_id
        self.held[rid] = max(self.held[rid], request.num_computed_tokens + n)
        if not copies_now:
            return
        self.after_allocate()
        if run:  # the step runs: these tokens' K/V are now in the cache
            self.after_step(request, n)
            request.num_computed_tokens += n

    @precondition(lambda self: self.requests)
    @rule(i=st.integers(0, 10**6))
    def finish(self, i):
        request = self.pick(i)
        self.memory.free(request)
        del self.requests[request.request_id], self.held[request.request_id]

    @precondition(lambda self: self.requests)
    @rule(i=st.integers(0, 10**6))
    def preempt(self, i):
        self._preempt(self.pick(i))

    def _preempt(self, request: Request) -> None:
        self.memory.free(request)
        request.num_computed_tokens = 0  # it will recompute from the start
        self.held[request.request_id] = 0
        self.forget(request)

    # -- invariants
    @invariant()
    def capacity_and_emptiness(self):
        if self.memory is None:
            return
        assert self.memory.capacity_tokens == self.capacity
        probe = Request("probe", [1], max_tokens=1)
        assert not self.memory.can_allocate(probe, self.capacity + 1)  # never more than the pool
        if not any(self.held.values()):  # everything given back ...
            assert self.used() == 0, f"Task 2.3: {self.used()} blocks still held after every request was freed"
            assert self.memory.can_allocate(probe, self.capacity), "Task 2.3: after every free, the whole pool is usable again"


class TokenCountingContract(KVMemoryContract):
    def make_memory(self, num_blocks, block_size):
        return TokenCountingMemory(num_blocks * block_size)

    def used(self):
        return self.memory.num_used_tokens

    def expected_fit(self, request, n):
        missing = max(0, request.num_computed_tokens + n - self.held[request.request_id])
        return missing <= self.capacity - sum(self.held.values())


class PagedMemoryMachine(KVMemoryContract):
    def __init__(self):
        super().__init__()
        self.pool: dict[int, int] = {}  # slot -> value: a model of the K/V pool
        self.expected: dict[str, list[int]] = {}  # request id -> values of its computed positions
        self.values = itertools.count()
        self.waiting: dict[int, int] = {}  # block given out as a copy since the last step -> the block it copies
        self.last_step: tuple[dict[int, int], list[tuple[int, int]]] = ({}, [])  # the last step's waiting and queue

    def make_memory(self, num_blocks, block_size):
        memory = PagedMemory(num_blocks, block_size)
        assert memory.block_size == block_size
        return memory

    def used(self):
        return self.memory.num_used_blocks

    def tables(self) -> dict[str, list[int]]:
        return {rid: self.memory.block_table(rid) for rid in self.requests}

    snapshot_legend = " (free blocks, used blocks, the tables)"

    def snapshot(self):
        return self.memory.num_free_blocks, self.memory.num_used_blocks, self.tables()

    def expected_fit(self, request, n):
        table = self.memory.block_table(request.request_id)
        owners = Counter(block for t in self.tables().values() for block in t)
        start, end = request.num_computed_tokens, request.num_computed_tokens + n
        missing = max(0, ceil_div(end, self.block_size) - len(table))
        written = range(start // self.block_size, min(len(table), ceil_div(end, self.block_size))) if n else []
        copies = sum(owners[table[i]] > 1 for i in written)  # shared blocks it writes into: copied first
        shared = [table[i] for i in range(len(table)) if owners[table[i]] > 1]
        self.fit_detail = (
            f" (its table {table} in blocks of {self.block_size} tokens, {start} tokens computed, shared with another "
            f"request: {shared or 'none'}; {self.memory.num_free_blocks} block(s) free)"
        )
        return missing + copies <= self.memory.num_free_blocks

    def add(self, request):
        super().add(request)
        self.expected[request.request_id] = []

    def after_allocate(self):
        copies = self.memory.take_block_copies()  # what the model runner does before the forward
        again = self.memory.take_block_copies()
        assert again == [], (
            f"Task 2.3: a stale queue: take_block_copies returned {copies}, and asked again at once, before any allocate, "
            f"{again}. Taken copies must leave the queue: the next step would apply them again, over K/V written since"
        )
        self._apply(copies)

    def _apply(self, copies: list[tuple[int, int]]) -> None:
        """copy_blocks on the model of the pool: every copy reads its source as it was before the call."""
        self.last_step, self.waiting = (self.waiting, copies), {}
        size = self.block_size
        before = {dst: [self.pool.get(src * size + offset) for offset in range(size)] for src, dst in copies}
        for dst, values in before.items():
            for offset, value in enumerate(values):
                self.pool[dst * size + offset] = value

    def allocated(self, request, before):
        old = before[2].get(request.request_id, [])
        self.waiting.update(copied_from(old, self.memory.block_table(request.request_id)))

    def after_step(self, request, n):
        start = request.num_computed_tokens
        slots = self.memory.slot_mapping(request.request_id, start, start + n)
        assert len(slots) == n
        for slot in slots:
            value = next(self.values)
            self.pool[slot] = value
            self.expected[request.request_id].append(value)

    def forget(self, request):
        self.expected[request.request_id] = []

    @precondition(lambda self: self.requests)
    @rule(i=st.integers(0, 10**6))
    def fork(self, i):
        parent = self.pick(i)
        if self.memory.block_table(parent.request_id):
            self._fork(parent)

    def _fork(self, parent: Request) -> Request:
        child = Request(f"r{next(self.ids)}", list(parent.prompt_token_ids), max_tokens=8)
        child.num_computed_tokens = parent.num_computed_tokens
        used = self.used()
        self.memory.fork(parent.request_id, child.request_id)
        assert self.used() == used, "Task 2.3: a fork shares blocks, it does not copy them"
        assert self.memory.block_table(child.request_id) == self.memory.block_table(parent.request_id)
        self.add(child)
        self.held[child.request_id] = self.held[parent.request_id]
        self.expected[child.request_id] = list(self.expected[parent.request_id])
        return child

    @precondition(lambda self: len(self.requests) >= 2)
    @rule(i=st.integers(0, 10**6), j=st.integers(0, 10**6), n=st.integers(1, 8))
    def grow_one_then_preempt_another(self, i, j, n):
        """One scheduling step: a request grows (queueing its copies), another is preempted, then the runner
        applies what is still queued. A copy whose destination someone still owns must survive the free."""
        request, victim = self.pick(i), self.pick(j)
        if request is victim or not self.memory.can_allocate(request, n):
            return
        self._allocate(request, n, run=False, copies_now=False)
        self._preempt(victim)
        copies = self.memory.take_block_copies()
        assert_no_copy_into_a_block_without_owner(self.memory, copies, f"free({victim.request_id!r})")
        self._apply(copies)

    @precondition(lambda self: self.requests)
    @rule(i=st.integers(0, 10**6), shared=st.booleans(), n=st.integers(1, 4), forks=st.integers(0, 2),
          m=st.integers(0, 4), victim=st.sampled_from(["the writer", "the child", "the grandchild", "another request"]),
          j=st.integers(0, 10**6), then_grow=st.integers(0, 3), k=st.integers(0, 10**6))
    def write_fork_and_free_before_the_step(self, i, shared, n, forks, m, victim, j, then_grow, k):
        """Before one step: a request (maybe forked first, so that its write copies) grows, queueing its copies, may
        be forked, the child may grow too, may be forked in turn and the grandchild may grow too (a copy of a copy of
        a copy), and then a request is freed. The runner then applies the queue: free's
        rule (1), no copy lands in a block with no owner, is checked on the queue itself; rule (2), every survivor
        reads what it wrote, by the invariants. Another request may grow after the free and before the step: no copy
        may then land twice in one block, or in a block that request took fresh."""
        writer = self.pick(i)
        if not self.memory.block_table(writer.request_id):
            return
        if shared:
            self._fork(writer)  # a sibling: every block of the writer is shared now
        if not self.memory.can_allocate(writer, n):
            return
        self._allocate(writer, n, run=False, copies_now=False)
        grown = [(writer, n)]
        forked = []  # the child, then the grandchild
        for _ in range(forks):
            forked.append(self._fork(forked[-1] if forked else writer))
            if m and self.memory.can_allocate(forked[-1], m):
                self._allocate(forked[-1], m, run=False, copies_now=False)
                grown.append((forked[-1], m))
        forked += [None, None]
        target = {"the writer": writer, "the child": forked[0], "the grandchild": forked[1]}.get(victim) or self.pick(j)
        self._preempt(target)
        handed_again: set[int] = set()  # blocks freed just now that a request after the free takes
        if then_grow and self.requests:  # another request grows after the free, before the step
            after = self.pick(k)
            freed_now = {b for b in range(self.num_blocks) if self.memory.allocator.ref_count(b) == 0}
            if after.request_id != target.request_id and self.memory.can_allocate(after, then_grow):
                old_table = self.memory.block_table(after.request_id)
                self._allocate(after, then_grow, run=False, copies_now=False)
                new_table = self.memory.block_table(after.request_id)
                copied_into = {new for i, new in enumerate(new_table) if i < len(old_table) and new != old_table[i]}
                handed_again = (set(new_table) - set(old_table) - copied_into) & freed_now
                grown.append((after, then_grow))
        copies = self.memory.take_block_copies()
        assert_no_copy_into_a_block_without_owner(self.memory, copies, f"free({target.request_id!r})")
        assert_no_copy_lands_twice_or_on_a_new_owner(copies, handed_again, f"free({target.request_id!r})")
        self._apply(copies)
        done = set()
        for request, tokens in grown:  # the step runs for the requests still holding their blocks
            if request is not target and request.request_id not in done:
                done.add(request.request_id)
                self.after_step(request, tokens)
                request.num_computed_tokens += tokens

    @precondition(lambda self: any(r.num_computed_tokens % self.block_size for r in self.requests.values()))
    @rule(i=st.integers(0, 10**6), n=st.integers(1, 3),
          victim=st.sampled_from(["nobody", "the first generation", "the second generation", "the third generation"]))
    def a_fork_of_a_fork_of_a_fork_before_the_step(self, i, n, victim):
        """Three generations before one step, each a copy of the one before: a request whose last block is partly
        filled and shared (a sibling is forked first) writes into it, is forked, the child writes, is forked, the
        grandchild writes; one of them may be freed. The runner then applies the queue: rule (1) is checked on the
        queue, and every survivor reads what it wrote (its prompt too) by the invariants."""
        partial = [r for r in self.requests.values() if r.num_computed_tokens % self.block_size]
        request = partial[i % len(partial)]
        self._fork(request)  # a sibling: the writer's last block is shared, so its write copies it
        generations = []
        for _ in range(3):
            if generations:
                request = self._fork(request)  # shares the copy the one before was given, still waiting for its K/V
            if not self.memory.can_allocate(request, n):
                break
            self._allocate(request, n, run=False, copies_now=False)
            generations.append(request)
        names = ["the first generation", "the second generation", "the third generation"]
        target = dict(zip(names, generations)).get(victim)
        if target is not None:
            self._preempt(target)
        copies = self.memory.take_block_copies()
        assert_no_copy_into_a_block_without_owner(self.memory, copies, f"freeing {victim}")
        self._apply(copies)
        for request in generations:  # the step runs for the generations still holding their blocks
            if request is not target:
                self.after_step(request, n)
                request.num_computed_tokens += n

    @precondition(lambda self: self.requests)
    @rule(i=st.integers(0, 10**6), ahead=st.integers(0, 8), fork_first=st.booleans(), child_writes=st.booleans(),
          n=st.integers(1, 8), keep=st.integers(0, 8))
    def draft_then_truncate_before_the_step(self, i, ahead, fork_first, child_writes, n, keep):
        """Speculative decoding's rewind: a request may hold slots ahead of its computed tokens (an earlier step's
        drafts) and may be forked, so that a write copies; then it (or its child) takes slots for n drafts and
        truncate keeps `keep` of them before the step runs. The queue must then meet free's rule (1); rule (2),
        every request reads what it wrote, is checked by the invariants."""
        writer = self.pick(i)
        if ahead and self.memory.can_allocate(writer, ahead):
            self._allocate(writer, ahead, run=False)  # a step ran without computing them
        if fork_first and self.memory.block_table(writer.request_id):
            child = self._fork(writer)
            writer = child if child_writes else writer
        if not self.memory.can_allocate(writer, n):
            return
        self._allocate(writer, n, run=False, copies_now=False)
        kept = writer.num_computed_tokens + min(keep, n)
        self.memory.truncate(writer, kept)
        self.held[writer.request_id] = kept
        copies = self.memory.take_block_copies()
        assert_no_copy_into_a_block_without_owner(self.memory, copies, f"truncate({writer.request_id!r}, {kept})")
        self._apply(copies)

    @invariant()
    def tables_and_counts_agree(self):
        if self.memory is None:
            return
        tables = self.tables()
        owners = Counter(block for t in tables.values() for block in t)
        assert self.memory.num_used_blocks == len(owners), (
            f"Task 2.3: {self.memory.num_used_blocks} blocks in use but {len(owners)} in the tables: a block leaked or was lost"
        )
        assert self.memory.num_free_blocks + self.memory.num_used_blocks == self.num_blocks
        for block, count in owners.items():
            assert 0 <= block < self.num_blocks
            assert self.memory.allocator.ref_count(block) == count, (
                f"Task 2.3: block {block} is in {count} table(s) but its reference count is {self.memory.allocator.ref_count(block)}"
            )
        for rid, table in tables.items():
            assert len(table) == ceil_div(self.held[rid], self.block_size), (
                f"Task 2.3: {rid} holds {len(table)} blocks for {self.held[rid]} tokens: exactly the blocks needed"
            )

    @invariant()
    def every_request_reads_what_it_wrote(self):
        for rid, request in self.requests.items():
            computed = request.num_computed_tokens
            if computed:
                slots = self.memory.slot_mapping(rid, 0, computed)
                got = [self.pool.get(s) for s in slots]
                wrong = [p for p in range(computed) if got[p] != self.expected[rid][p]]
                assert not wrong, (
                    f"Task 2.3: {rid} does not read back what it wrote at positions {wrong[:8]}"
                    f"{' ...' if len(wrong) > 8 else ''} of {computed}: "
                    + (copies_of_copies(self.last_step[0], self.memory.block_table(rid), rid, self.last_step[1])
                       or "a shared block was written in place, or a copy was lost")
                )


# A correct PagedMemory passes in seconds, but a wrong one sends hypothesis shrinking the failing sequence of calls
# to its shortest story: 2 to 4 minutes on a busy 2-core machine. Shrinking stops after SHRINK_SECONDS (hypothesis
# reads this module constant at every shrink, and says it may be patched) with the shortest story found so far: a
# failure then reports in about 30 s, with the same message.
SHRINK_SECONDS = 15


@contextlib.contextmanager
def shrinking_for_at_most(seconds: float):
    if not hasattr(hypothesis_engine, "MAX_SHRINKING_SECONDS"):  # a hypothesis without it: shrink as it likes
        yield
        return
    saved = hypothesis_engine.MAX_SHRINKING_SECONDS
    hypothesis_engine.MAX_SHRINKING_SECONDS = seconds
    try:
        yield
    finally:
        hypothesis_engine.MAX_SHRINKING_SECONDS = saved


@pytest.mark.timeout(180)
@pytest.mark.task("2.3")
def test_paged_memory_state_machine():
    with shrinking_for_at_most(SHRINK_SECONDS):
        run_state_machine_as_test(PagedMemoryMachine, settings=MACHINE_SETTINGS)


@pytest.mark.ungraded
def test_token_counting_memory_meets_the_same_contract():
    with shrinking_for_at_most(SHRINK_SECONDS):
        run_state_machine_as_test(TokenCountingContract, settings=MACHINE_SETTINGS)


@pytest.mark.task("2.3")
@given(num_blocks=st.integers(1, 10), block_size=st.sampled_from([1, 2, 7, 16]), lengths=st.lists(st.integers(1, 60), max_size=6))
@example(num_blocks=3, block_size=1, lengths=[1, 2, 1])  # block size 1: then the pool is full
@example(num_blocks=5, block_size=16, lengths=[16, 32, 17])  # prompts ending exactly on a block boundary
@example(num_blocks=4, block_size=7, lengths=[14, 14])  # the pool exactly full
@example(num_blocks=4, block_size=16, lengths=[33, 17])  # does not fit: clear error, nothing changed
def test_prompts_take_exactly_the_blocks_they_need(num_blocks, block_size, lengths):
    memory = PagedMemory(num_blocks, block_size)
    assert memory.capacity_tokens == num_blocks * block_size
    admitted = []
    for i, length in enumerate(lengths):
        request = Request(f"req-{i}", list(range(length)), max_tokens=4)
        used = sum(ceil_div(len(r.prompt_token_ids), block_size) for r in admitted)
        fits = used + ceil_div(length, block_size) <= num_blocks
        assert memory.can_allocate(request, length) == fits
        if not fits:
            before = (memory.num_free_blocks, {r.request_id: memory.block_table(r.request_id) for r in admitted})
            error = refused(OutOfBlocksError, lambda: memory.allocate(request, length),
                            f"Task 2.3: allocate(req-{i}, {length}) must raise OutOfBlocksError: the pool cannot hold it")
            assert f"req-{i}" in str(error), f"Task 2.3: the OutOfBlocksError {str(error)!r} must name the request, req-{i}"
            assert (memory.num_free_blocks, {r.request_id: memory.block_table(r.request_id) for r in admitted}) == before
            assert memory.block_table(request.request_id) == []
            continue
        memory.allocate(request, length)
        admitted.append(request)
        table = memory.block_table(request.request_id)
        assert len(table) == ceil_div(length, block_size)
        assert len(memory.slot_mapping(request.request_id, 0, length)) == length
        assert memory.num_used_blocks == used + len(table) and memory.num_free_blocks == num_blocks - memory.num_used_blocks
    all_slots = [s for r in admitted for s in memory.slot_mapping(r.request_id, 0, len(r.prompt_token_ids))]
    assert len(set(all_slots)) == len(all_slots)  # no two tokens share a slot
    assert all(0 <= s < memory.capacity_tokens for s in all_slots)
    for request in admitted:
        memory.free(request)
    assert memory.num_free_blocks == num_blocks and memory.num_used_blocks == 0


@pytest.mark.task("2.3")
@pytest.mark.parametrize("block_size", [1, 7, 16])
def test_decode_adds_a_block_only_when_crossing_a_block_boundary(block_size):
    memory = PagedMemory(45, block_size)
    request = Request("r", [1] * 5, max_tokens=40)
    memory.allocate(request, 5)
    request.num_computed_tokens = 5
    for step in range(40):
        used = memory.num_used_blocks
        memory.allocate(request, 1)
        new_blocks = memory.num_used_blocks - used
        assert new_blocks == (1 if request.num_computed_tokens % block_size == 0 else 0)
        request.num_computed_tokens += 1
        memory.allocate(request, 0)  # nothing new asked: nothing changes
        assert memory.num_used_blocks == used + new_blocks


@pytest.mark.task("2.3")
@pytest.mark.parametrize("prompt_len", [10, 8])  # the last block partly filled, or exactly full
def test_fork_shares_blocks_and_copies_the_partial_block_on_write(prompt_len):
    memory = PagedMemory(10, 4)
    parent = Request("parent", list(range(prompt_len)), max_tokens=4)
    memory.allocate(parent, prompt_len)
    parent.num_computed_tokens = prompt_len
    used = memory.num_used_blocks
    child = Request("child", list(range(prompt_len)), max_tokens=4)
    child.num_computed_tokens = prompt_len
    memory.fork("parent", "child")
    assert memory.num_used_blocks == used and memory.block_table("child") == memory.block_table("parent")
    assert memory.take_block_copies() == []
    memory.allocate(child, 0)  # nothing new asked: no position is written, so nothing is copied
    assert memory.block_table("child") == memory.block_table("parent") and memory.take_block_copies() == [], (
        "Task 2.3: allocate(request, 0) writes no position: a shared block must stay shared, with no copy queued"
    )

    memory.allocate(child, 1)  # the child writes position prompt_len
    parent_table, child_table = memory.block_table("parent"), memory.block_table("child")
    full = prompt_len // 4
    assert child_table[:full] == parent_table[:full]  # full blocks stay shared
    copies = memory.take_block_copies()
    if prompt_len % 4:  # the partial last block: the child gets its own copy
        assert len(child_table) == len(parent_table) and child_table[full] != parent_table[full]
        assert copies == [(parent_table[full], child_table[full])]
    else:  # nothing shared is written: a fresh block, nothing to copy
        assert len(child_table) == len(parent_table) + 1 and child_table[full] not in parent_table
        assert copies == []
    assert memory.num_used_blocks == used + 1

    memory.allocate(parent, 1)  # the parent's partial block is its own again: written in place
    assert memory.block_table("parent")[: len(parent_table)] == parent_table
    stale = memory.take_block_copies()
    assert stale == [], (
        f"Task 2.3: a stale queue: take_block_copies returned {stale} after the parent wrote into its own block, but the "
        f"child's copy {copies} was already taken: taken copies must leave the queue, or the next step applies them "
        "again over K/V written since"
    )
    memory.free(parent)
    memory.free(child)
    assert memory.num_used_blocks == 0


@pytest.mark.task("2.3")
@pytest.mark.parametrize("who_is_freed", ["the child", "another request"])
def test_no_copy_is_queued_into_a_block_freed_before_the_step(who_is_freed):
    memory = PagedMemory(6, 4)
    parent, child = Request("parent", [1] * 6, max_tokens=4), Request("child", [1] * 6, max_tokens=4)
    other = Request("other", [2] * 3, max_tokens=4)
    memory.allocate(parent, 6)
    memory.allocate(other, 3)
    parent.num_computed_tokens = child.num_computed_tokens = 6
    memory.fork("parent", "child")
    memory.allocate(child, 1)  # queues a copy of the shared partial block ...
    if who_is_freed == "the child":
        memory.free(child)  # ... but the child is preempted before the step runs
        assert memory.take_block_copies() == [], (
            "Task 2.3: a copy into the block of a request freed before the step would overwrite that block's next owner"
        )
        assert memory.num_used_blocks == 3, f"Task 2.3: {memory.num_used_blocks} blocks in use; the parent and the other hold 3"
    else:
        memory.free(other)  # someone else finishes: the child's copy must still happen
        copies = memory.take_block_copies()
        assert_no_copy_into_a_block_without_owner(memory, copies, "free('other')")
        assert copies == [(memory.block_table("parent")[1], memory.block_table("child")[1])], (
            f"Task 2.3: queued copies {copies}: freeing another request must not drop the child's copy-on-write"
        )


@pytest.mark.task("2.3")
@pytest.mark.parametrize("freed", ["the parent", "the child, forked again first"])
def test_a_queued_copy_stays_while_its_destination_has_an_owner(freed):
    """A child writes into the block it shares with its parent (a copy is queued), then, before the step, the parent
    is freed, or the child is forked again and freed: a request still reads the copy's destination after the step."""
    memory = PagedMemory(8, 4)
    parent, child = Request("parent", [1] * 6, max_tokens=4), Request("child", [1] * 6, max_tokens=4)
    memory.allocate(parent, 6)
    parent.num_computed_tokens = child.num_computed_tokens = 6
    memory.fork("parent", "child")
    source = memory.block_table("parent")[1]
    memory.allocate(child, 1)  # queues (source, the child's private copy of block 1)
    destination = memory.block_table("child")[1]
    if freed == "the parent":
        memory.free(parent)  # the source keeps its K/V until the step runs: the child still needs the copy
        reader = "child"
    else:
        grandchild = Request("grandchild", [1] * 6, max_tokens=4)
        grandchild.num_computed_tokens = 6  # the child's computed tokens: its write is not run yet
        memory.fork("child", "grandchild")  # the grandchild shares the child's new block
        memory.free(child)
        reader = "grandchild"
    copies = memory.take_block_copies()
    assert_no_copy_into_a_block_without_owner(memory, copies, f"freeing {freed}")
    assert copies == [(source, destination)], (
        f"Task 2.3: queued copies {copies} after freeing {freed}: the copy ({source}, {destination}) must stay, since "
        f"{reader!r} still owns block {destination} and reads it after the step"
    )
    assert memory.block_table(reader)[1] == destination


@pytest.mark.task("2.3")
@pytest.mark.parametrize("freed", ["nobody", "the parent", "the child"])
def test_a_fork_before_the_step_reads_its_prompt(freed):
    """A request writes into a shared block (a copy is queued) and is forked before the step; the child writes too,
    is forked in turn, and the grandchild writes too: three generations, each a copy of the one before.

    Each private block holds nothing until the queued copies run, so every copy must end up with what the block it
    was copied from is waiting for, applied by copy_blocks as the runner does, and still so if a generation is freed
    before the step (its own copy is then dropped: nobody owns its destination)."""
    block_size = 4
    memory = PagedMemory(8, block_size)
    pool = make_pool(TINY, 8, block_size, torch.float32)
    first = Request("first", [1] * 6, max_tokens=4)
    memory.allocate(first, 6)
    for position, slot in enumerate(memory.slot_mapping("first", 0, 6)):  # the prompt's K/V: 100, 101, ...
        pool.k[:, slot] = pool.v[:, slot] = 100.0 + position
    first.num_computed_tokens = 6
    generations = {"parent": "the first generation", "child": "the second generation",
                   "grandchild": "the third generation"}
    waiting: dict[int, int] = {}
    requests = {}
    forked_from = "first"
    for name in generations:  # each forks the one before and writes position 6 into the shared block 1, before the step
        request = Request(name, [1] * 6, max_tokens=4)
        request.num_computed_tokens = 6
        memory.fork(forked_from, name)  # shares the block the one before was given, still waiting for its K/V
        shared = memory.block_table(name)
        memory.allocate(request, 1)  # a copy is queued
        waiting.update(copied_from(shared, memory.block_table(name)))
        requests[name], forked_from = request, name
    readers = list(generations)
    if freed != "nobody":
        victim = freed.removeprefix("the ")
        memory.free(requests[victim])  # its copy's destination has no owner left; the next one's copy still needs the K/V
        readers.remove(victim)
    copies = memory.take_block_copies()
    assert_no_copy_into_a_block_without_owner(memory, copies, f"freeing {freed}")
    copy_blocks(pool, copies, block_size)
    for reader in readers:
        slots = memory.slot_mapping(reader, 0, 6)
        for name, cache in (("K", pool.k), ("V", pool.v)):
            got = [round(cache[0, slot, 0, 0].item()) for slot in slots]
            assert got == list(range(100, 106)), (
                f"Task 2.3: {generations[reader]} ({reader!r}, a fork of a fork before the step) reads {name} {got} "
                f"at positions 0..5 instead of its prompt's {list(range(100, 106))} after the queued copies "
                f"{copies} (freed before the step: {freed}): "
                + (copies_of_copies(waiting, memory.block_table(reader), reader, copies)
                   or ("zeros where its prompt should be, " if 0 in got else "")
                   + f"so {reader!r} would attend to K/V its prompt never wrote")
            )


@pytest.mark.task("2.3")
def test_a_table_longer_than_the_write_needs_still_counts_its_copies():
    """A table may already hold blocks past the write (slots taken for drafts that were not computed, chapter 9):
    they are no block the write needs, and they do not pay for the copy of a shared block it writes into."""
    memory = PagedMemory(3, 4)
    parent = Request("parent", [1] * 6, max_tokens=8)
    memory.allocate(parent, 6)
    parent.num_computed_tokens = 6
    memory.allocate(parent, 3)  # positions 6..8 taken ahead (not computed yet): a third block, the pool is full
    child = Request("child", [1] * 6, max_tokens=8)
    child.num_computed_tokens = 6
    memory.fork("parent", "child")
    fits = memory.can_allocate(child, 1)  # position 6 lands in the shared block 1: a copy, and no block is free
    assert not fits, (
        "Task 2.3: can_allocate said yes for the child + 1 token, but its write needs a copy of a shared block and no block "
        "is free: the table's third block (beyond the write) is no room for that copy"
    )
    error = refused(OutOfBlocksError, lambda: memory.allocate(child, 1),
                    "Task 2.3: allocate(child, 1) must raise OutOfBlocksError: its write needs a copy and no block is free")
    assert "child" in str(error), f"Task 2.3: the OutOfBlocksError {str(error)!r} must name the request, 'child'"


@pytest.mark.task("2.3")
def test_a_refused_allocation_keeps_the_shared_block_it_would_have_copied():
    """allocate refused after part of it could be done: the copy of a shared block fits, the growth does not."""
    memory = PagedMemory(3, 4)
    a, b, c = (Request(name, [1] * 4, max_tokens=8) for name in ("A", "B", "C"))
    memory.allocate(a, 2)
    a.num_computed_tokens = b.num_computed_tokens = 2
    memory.fork("A", "B")
    memory.allocate(c, 1)  # one block left free
    shared = memory.block_table("A")[0]
    assert not memory.can_allocate(b, 3), "Task 2.3: B + 3 tokens needs a copy of its shared block and one more block; 1 is free"
    error = refused(OutOfBlocksError, lambda: memory.allocate(b, 3),
                    "Task 2.3: allocate(B, 3) must raise OutOfBlocksError: it needs 2 blocks (a copy and a new one), 1 is free")
    assert "B" in str(error), f"Task 2.3: the OutOfBlocksError {str(error)!r} must name the request, 'B'"
    state = (memory.num_free_blocks, memory.block_table("B"), memory.allocator.ref_count(shared), memory.take_block_copies())
    assert state == (1, [shared], 2, []), (
        f"Task 2.3: allocate(B, 3) was refused but left {state[0]} block(s) free, B's table {state[1]}, block {shared} with "
        f"{state[2]} owner(s) and the queue of copies {state[3]}; before the call: 1 free, [{shared}], 2 owners, no "
        "copy. A refused allocation changes nothing: B holds a copy of its shared block that it never asked to keep, "
        "and the pool has lost the block the next request needs"
    )


@pytest.mark.task("2.3")
def test_a_block_freed_before_the_step_and_taken_again_gets_only_its_new_copy():
    """Between two steps: B writes into a shared block (a copy is queued), B is freed, and E's write takes a block."""
    block_size = 2
    memory = PagedMemory(3, block_size)
    pool = make_pool(TINY, 3, block_size, torch.float32)
    requests = {name: Request(name, [1], max_tokens=4) for name in "ADBE"}
    for name, value in (("A", 100.0), ("D", 200.0)):
        memory.allocate(requests[name], 1)
        pool.k[:, memory.slot_mapping(name, 0, 1)[0]] = pool.v[:, memory.slot_mapping(name, 0, 1)[0]] = value
    for request in requests.values():
        request.num_computed_tokens = 1
    memory.fork("A", "B")
    memory.fork("D", "E")
    memory.allocate(requests["B"], 1)  # B writes position 1 into A's block: a copy is queued
    memory.free(requests["B"])  # B is preempted before the step
    memory.allocate(requests["E"], 1)  # E writes position 1 into D's block: its copy takes the free block
    copies = memory.take_block_copies()
    assert_no_copy_lands_twice_or_on_a_new_owner(copies, set(), "free('B')")
    copy_blocks(pool, copies, block_size)
    for name, source, value in (("A", "A", 100), ("D", "D", 200), ("E", "D", 200)):
        slot = memory.slot_mapping(name, 0, 1)[0]
        got = round(pool.k[0, slot, 0, 0].item())
        assert got == value, (
            f"Task 2.3: after the queued copies {copies}, {name!r} reads K {got} at position 0 where {source!r}'s prompt wrote "
            f"{value}: E's copy of D's block was overwritten by a copy queued for B, who was freed before the step"
        )


@pytest.mark.task("2.3")
def test_a_truncate_before_the_step_drops_the_copy_into_the_block_it_gave_back():
    """Drafts (chapter 9) take slots ahead and truncate gives back the rejected ones, maybe before the step runs.

    P holds 8 positions in blocks of 4 (4 computed, 4 drafts); C forks P and writes its own drafts into the shared
    second block (a copy is queued); then C's drafts are rejected: truncate(C, 4) gives that copy back."""
    memory = PagedMemory(4, 4)
    parent, child = Request("P", [1] * 4, max_tokens=8), Request("C", [1] * 4, max_tokens=8)
    memory.allocate(parent, 4)
    parent.num_computed_tokens = child.num_computed_tokens = 4
    memory.allocate(parent, 4)  # slots for P's drafts, positions 4..7
    memory.take_block_copies()  # a step ran
    memory.fork("P", "C")
    memory.allocate(child, 4)  # C's drafts land in the shared second block: a copy is queued
    copied_into = memory.block_table("C")[1]
    memory.truncate(child, 4)  # C's drafts rejected before the step: its copy goes back to the pool
    assert memory.block_table("C") == memory.block_table("P")[:1], "Task 2.3: truncate(C, 4) keeps the one block of 4 tokens"
    assert memory.allocator.ref_count(copied_into) == 0, f"Task 2.3: block {copied_into} has no owner after truncate(C, 4)"
    copies = memory.take_block_copies()
    assert not copies, (
        f"Task 2.3: the queue of copies writes into a block that has no owner: {copies} queued after truncate('C', 4) gave "
        f"block {copied_into} back; truncate gives blocks back like free, and the queue must then meet rule (1) of "
        "free's contract (no copy into a block that has no owner: it may be handed out again before the step)"
    )
