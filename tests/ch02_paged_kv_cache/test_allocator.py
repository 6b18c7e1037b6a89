"""Task 2.1: the block allocator, checked as a state machine against a model of owners.

The model is a list of owners, each holding one block. The allocator may
choose any block ids it likes; the tests only check what every correct
allocator must do: a block in use is never handed out again, the counts
add up after any sequence of operations, and copy-on-write never changes
what another owner of a block sees.
"""

import itertools
import random
import time
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from miniyaie.paged import BlockAllocator, OutOfBlocksError
from refusals import refused

MACHINE_SETTINGS = settings(max_examples=200, stateful_step_count=50)


@dataclass(eq=False)
class Owner:
    block: int
    expected: int  # what this owner last wrote into (or read from) its block


class AllocatorMachine(RuleBasedStateMachine):
    """allocate, allocate_many, free, share, and the errors of misuse."""

    def __init__(self):
        super().__init__()
        self.allocator: BlockAllocator | None = None
        self.owners: list[Owner] = []
        self.contents: dict[int, int] = {}  # block -> value last written: a model of the K/V pool
        self.values = itertools.count()

    @initialize(num_blocks=st.integers(1, 8))
    def make_allocator(self, num_blocks):
        self.num_blocks = num_blocks
        self.allocator = BlockAllocator(num_blocks)
        assert self.allocator.num_blocks == num_blocks

    def owned(self) -> Counter:
        return Counter(o.block for o in self.owners)

    def _new_owner(self, block: int) -> None:
        assert 0 <= block < self.num_blocks
        assert block not in self.owned(), f"Task 2.1: block {block} was handed out while still in use"
        value = next(self.values)
        self.contents[block] = value  # the new owner fills its block
        self.owners.append(Owner(block, value))

    @rule()
    def allocate(self):
        if len(self.owned()) == self.num_blocks:
            refused(OutOfBlocksError, self.allocator.allocate,
                    f"Task 2.1: allocate() with all {self.num_blocks} blocks in use must raise OutOfBlocksError")
        else:
            self._new_owner(self.allocator.allocate())

    @rule(n=st.integers(0, 9))
    def allocate_many(self, n):
        free = self.num_blocks - len(self.owned())
        if n > free:
            refused(OutOfBlocksError, lambda: self.allocator.allocate_many(n),
                    f"Task 2.1: allocate_many({n}) with {free} block(s) free must raise OutOfBlocksError and take none")
            assert self.allocator.num_free == free, (
                f"Task 2.1: allocate_many({n}) with {free} blocks free was refused but left {self.allocator.num_free} free: "
                "a refused call must take nothing"
            )
            return
        blocks = self.allocator.allocate_many(n)
        assert len(blocks) == n and len(set(blocks)) == n
        for block in blocks:
            self._new_owner(block)

    @precondition(lambda self: self.owners)
    @rule(i=st.integers(0, 10**6))
    def free(self, i):
        owner = self.owners.pop(i % len(self.owners))
        self.allocator.free(owner.block)

    @precondition(lambda self: self.owners)
    @rule(i=st.integers(0, 10**6))
    def share(self, i):
        owner = self.owners[i % len(self.owners)]
        self.allocator.share(owner.block)
        self.owners.append(Owner(owner.block, owner.expected))

    @rule(block=st.integers(0, 7))
    def misuse_of_a_free_block_raises(self, block):
        block %= self.num_blocks
        if block in self.owned():
            return
        free_before = self.allocator.num_free
        refused(ValueError, lambda: self.allocator.free(block),
                f"Task 2.1: free({block}) of a free block is a double free, a ValueError that changes nothing")
        assert self.allocator.ref_count(block) == 0 and self.allocator.num_free == free_before, (
            f"Task 2.1: a refused double free of block {block} left its ref_count {self.allocator.ref_count(block)} and "
            f"{self.allocator.num_free} blocks free (was 0 and {free_before}): a refused call changes nothing"
        )
        refused(ValueError, lambda: self.allocator.share(block),
                f"Task 2.1: share({block}) of a free block (nobody filled it) must raise ValueError and change nothing")
        assert self.allocator.ref_count(block) == 0 and self.allocator.num_free == free_before, (
            f"Task 2.1: a refused share of free block {block} left its ref_count {self.allocator.ref_count(block)} and "
            f"{self.allocator.num_free} blocks free (was 0 and {free_before}): a refused call changes nothing"
        )

    @invariant()
    def counts_add_up(self):
        if self.allocator is None:
            return
        owned = self.owned()
        assert self.allocator.num_used == len(owned), (
            f"Task 2.1: num_used is {self.allocator.num_used} but {len(owned)} distinct blocks have owners (a shared block counts once)"
        )
        assert self.allocator.num_free == self.num_blocks - len(owned), (
            f"Task 2.1: num_free is {self.allocator.num_free} but {self.num_blocks - len(owned)} blocks have no owner"
        )
        assert self.allocator.num_free + self.allocator.num_used == self.num_blocks  # no leak
        for block in range(self.num_blocks):
            assert self.allocator.ref_count(block) == owned.get(block, 0), (
                f"Task 2.1: block {block} has {owned.get(block, 0)} owner(s) but ref_count says {self.allocator.ref_count(block)}"
            )

    @invariant()
    def every_owner_sees_its_data(self):
        for owner in self.owners:
            assert self.contents[owner.block] == owner.expected, (
                f"Task 2.1: an owner of block {owner.block} no longer sees what it wrote: the block was handed to a second owner"
            )


class CopyOnWriteMachine(AllocatorMachine):
    """The same, plus owners that write into their block through copy-on-write."""

    @precondition(lambda self: self.owners)
    @rule(i=st.integers(0, 10**6))
    def write(self, i):
        owner = self.owners[i % len(self.owners)]
        shared = self.owned()[owner.block] > 1
        if shared and len(self.owned()) == self.num_blocks:
            count = self.owned()[owner.block]
            refused(OutOfBlocksError, lambda: self.allocator.copy_on_write(owner.block),
                    f"Task 2.1: copy_on_write({owner.block}) of a block with {count} owners on a full pool must raise "
                    "OutOfBlocksError (no block is free for the copy) and change nothing")
            assert self.allocator.ref_count(owner.block) == count, (
                f"Task 2.1: a refused copy_on_write of block {owner.block} (full pool) left it {self.allocator.ref_count(owner.block)} "
                f"owner(s), not {count}: the writer must keep its reference when no copy can be taken"
            )
            return
        block = self.allocator.copy_on_write(owner.block)
        if not shared:
            assert block == owner.block, "Task 2.1: an unshared block is written in place"
        else:
            assert block != owner.block, "Task 2.1: a shared block must not be written in place"
            old = owner.block
            owner.block = -1  # no longer an owner of `old`
            self._new_owner_of_copy(old, block, owner)
        value = next(self.values)
        self.contents[block] = value
        owner.expected = value

    def _new_owner_of_copy(self, old: int, new: int, owner: Owner) -> None:
        assert 0 <= new < self.num_blocks
        assert new not in self.owned(), f"Task 2.1: copy-on-write handed out block {new} while still in use"
        self.contents[new] = self.contents[old]  # the caller copies the K/V
        owner.block = new


@pytest.mark.task("2.1")
def test_allocator_state_machine():
    run_state_machine_as_test(AllocatorMachine, settings=MACHINE_SETTINGS)


@pytest.mark.task("2.1")
def test_copy_on_write_state_machine():
    run_state_machine_as_test(CopyOnWriteMachine, settings=MACHINE_SETTINGS)


@pytest.mark.task("2.1")
@given(num_blocks=st.integers(1, 12), first=st.integers(0, 12), second=st.integers(0, 12))
@example(num_blocks=4, first=4, second=0)  # the pool exactly full
@example(num_blocks=4, first=4, second=1)  # full, then one more
@example(num_blocks=4, first=3, second=2)  # does not fit although one block is free
def test_allocate_many_is_all_or_nothing(num_blocks, first, second):
    allocator = BlockAllocator(num_blocks)
    taken = []
    for n in (first, second):
        free_before = allocator.num_free
        if n <= free_before:
            blocks = allocator.allocate_many(n)
            assert len(set(blocks)) == n and not set(blocks) & set(taken)
            taken += blocks
        else:
            error = refused(OutOfBlocksError, lambda: allocator.allocate_many(n),
                            f"Task 2.1: allocate_many({n}) with {free_before} block(s) free must raise OutOfBlocksError")
            assert str(n) in str(error), (
                f"Task 2.1: allocate_many({n})'s OutOfBlocksError says {str(error)!r}: it must say how many blocks were asked for"
            )
            assert allocator.num_free == free_before, (
                f"Task 2.1: a refused allocate_many({n}) left {allocator.num_free} blocks free, not {free_before}: it took some"
            )
        assert allocator.num_used == len(taken) and allocator.num_free == num_blocks - len(taken), (
            f"Task 2.1: {len(taken)} blocks taken of {num_blocks}, but num_used={allocator.num_used}, num_free={allocator.num_free}"
        )
    if allocator.num_free == 0:
        refused(OutOfBlocksError, allocator.allocate, "Task 2.1: allocate() on a full pool must raise OutOfBlocksError")
    for block in taken:
        allocator.free(block)
    assert allocator.num_free == num_blocks and allocator.num_used == 0, (
        f"Task 2.1: every block taken was freed, but num_free={allocator.num_free}, num_used={allocator.num_used} "
        f"(a pool of {num_blocks})"
    )
    again = allocator.allocate_many(num_blocks)
    assert len(set(again)) == num_blocks, (  # every block comes back
        f"Task 2.1: after every block was freed, allocate_many({num_blocks}) gave {again}: not {num_blocks} distinct blocks"
    )
    refused(ValueError, lambda: allocator.allocate_many(-1),
            "Task 2.1: allocate_many(-1) must raise ValueError: a negative count is a caller's bug, not a request for no block")


@pytest.mark.task("2.1")
def test_a_block_returns_to_the_free_list_with_its_last_owner():
    allocator = BlockAllocator(2)
    block = allocator.allocate()
    allocator.share(block)
    assert allocator.ref_count(block) == 2, f"Task 2.1: a block allocated then shared has 2 owners, ref_count says {allocator.ref_count(block)}"
    allocator.free(block)
    assert allocator.ref_count(block) == 1 and allocator.num_used == 1, "Task 2.1: a shared block freed once is still in use"
    allocator.free(block)
    assert allocator.ref_count(block) == 0 and allocator.num_free == 2, (
        f"Task 2.1: the last owner of block {block} let go, but its ref_count is {allocator.ref_count(block)} and "
        f"{allocator.num_free} of 2 blocks are free: a block goes back to the pool with its last owner"
    )
    refused(ValueError, lambda: allocator.free(block),
            f"Task 2.1: free({block}) after its last owner let go is a double free: it must raise ValueError")
    assert allocator.ref_count(block) == 0 and allocator.num_free == 2, (
        f"Task 2.1: a refused double free left ref_count {allocator.ref_count(block)} and {allocator.num_free} free blocks "
        "(was 0 and 2): check before changing anything"
    )


@pytest.mark.task("2.1")
def test_copy_on_write_copies_only_shared_blocks():
    allocator = BlockAllocator(3)
    block = allocator.allocate()
    same = allocator.copy_on_write(block)
    assert same == block and allocator.ref_count(block) == 1 and allocator.num_used == 1, (
        f"Task 2.1: copy_on_write({block}) of a block with one owner returned {same} (ref_count "
        f"{allocator.ref_count(block)}, {allocator.num_used} block(s) in use): its only owner writes in place, so it "
        "returns the same block and takes nothing"
    )
    allocator.share(block)
    copy = allocator.copy_on_write(block)
    assert copy != block, (
        f"Task 2.1: copy_on_write({block}) of a block with 2 owners returned the block itself: the writer must get a "
        "private copy, or the other owner sees the write"
    )
    counts = (allocator.ref_count(block), allocator.ref_count(copy), allocator.num_used)
    assert counts == (1, 1, 2), (
        f"Task 2.1: after copy_on_write({block}) of a block with 2 owners gave block {copy}: ref_count({block}) = "
        f"{counts[0]}, ref_count({copy}) = {counts[1]}, num_used = {counts[2]}; expected 1, 1 and 2: the writer drops "
        "its share of the old block and owns the copy alone"
    )
    other = allocator.allocate()  # the pool is now full
    allocator.share(other)
    refused(OutOfBlocksError, lambda: allocator.copy_on_write(other),
            f"Task 2.1: copy_on_write({other}) of a block with 2 owners on a full pool must raise OutOfBlocksError")
    assert allocator.ref_count(other) == 2 and allocator.num_free == 0, (
        f"Task 2.1: a refused copy_on_write changed the pool: ref_count {allocator.ref_count(other)} (was 2), "
        f"{allocator.num_free} free (was 0); the owner's reference must not be dropped when no copy can be taken"
    )
    allocator.free(copy)  # one block free again, nobody owns it
    with pytest.raises(ValueError):
        got = allocator.copy_on_write(copy)
        pytest.fail(f"copy_on_write of free block {copy} returned {got}: a free block has no owner to write into it, "
                    "that is a ValueError")
    assert allocator.num_free == 1 and allocator.ref_count(copy) == 0, (
        f"Task 2.1: copy_on_write of a free block left {allocator.num_free} block(s) free (was 1) and ref_count "
        f"{allocator.ref_count(copy)}: it must raise ValueError before taking a block or dropping an owner"
    )


POOL_BLOCKS = 2_000_000  # a pool this size makes any call that walks it cost milliseconds
HELD_BLOCKS = 1_000_000
RETURNED_BLOCKS = 500_000  # then given back in random order: a free list this long costs a walk milliseconds too
CYCLES = 4_000  # with the held blocks side by side, then as many again with the returned ones scattered
WORK_BUDGET_S = 10.0  # CPU seconds; the reference needs about one


@pytest.mark.task("2.1")
def test_no_operation_walks_the_pool():
    """Every call costs the same whatever the pool's size: thousands of calls of each kind on a pool of millions.

    Half the pool is taken (in growing batches), then each cycle frees random held blocks, takes them back with
    allocate and with small allocate_many calls, shares a held block and writes into it (copy_on_write, shared and
    then unshared), and reads num_used, num_free and a ref_count. Then half of the held blocks go back in random
    order, and the same cycles run again over a long, scattered free list. The only clock is a budget of CPU
    seconds many times what the reference needs, checked as the work goes and kept per operation, so that a walk
    fails here with the operation's name, not at the time limit."""
    spent: Counter = Counter()  # operation -> CPU seconds inside it
    calls: Counter = Counter()
    walked = ["the pool"]  # what a walk would be walking at this point of the test

    def call(name: str, operation, *args):
        before = time.process_time()
        result = operation(*args)
        spent[name] += time.process_time() - before
        calls[name] += 1
        return result

    def within_budget(doing: str) -> None:
        total = sum(spent.values())
        if total > WORK_BUDGET_S:
            slowest = max(spent, key=spent.get)
            pytest.fail(
                f"Task 2.1: an operation walks {walked[0]}: {slowest} took {spent[slowest]:.1f} CPU s in "
                f"{calls[slowest]:,} calls. No call may look at every block, nor at every free block: each must cost "
                "the same on a pool of 10 or 10 million, with 3 free blocks or 3 million. "
                f"Stopped while {doing}: a pool of {POOL_BLOCKS:,} blocks, {spent[slowest] / calls[slowest] * 1e3:.2f} "
                f"ms a call of {slowest}, all calls {total:.1f} s, over the budget of {WORK_BUDGET_S:g} (the reference "
                "takes about one). Time per operation: "
                + ", ".join(f"{name} {seconds:.2f} s / {calls[name]:,}" for name, seconds in spent.most_common()),
                pytrace=False,
            )

    allocator = BlockAllocator(POOL_BLOCKS)
    held: list[int] = []
    while len(held) < HELD_BLOCKS:
        within_budget(f"taking the first {HELD_BLOCKS:,} blocks with allocate_many (held {len(held):,})")
        held += call("allocate_many", allocator.allocate_many, min(HELD_BLOCKS - len(held), len(held) // 4 + 1))
    assert len(set(held)) == HELD_BLOCKS and allocator.num_used == HELD_BLOCKS, (
        f"Task 2.1: allocate_many handed out {len(set(held)):,} distinct blocks, num_used says {allocator.num_used:,}; "
        f"{HELD_BLOCKS:,} were taken"
    )
    rng = random.Random(0)

    def free_one() -> None:
        i = rng.randrange(len(held))
        held[i], held[-1] = held[-1], held[i]
        call("free", allocator.free, held.pop())

    def cycles(doing: str) -> None:
        for cycle in range(CYCLES):
            if cycle % 10 == 0:
                within_budget(f"{doing} ({cycle:,} of {CYCLES:,} cycles done)")
            free_one()
            block = call("allocate", allocator.allocate)
            held.append(block)
            assert call("ref_count", allocator.ref_count, block) == 1
            n = 1 + cycle % 3  # small batches: a request's next block or two
            for _ in range(n):
                free_one()
            taken = call("allocate_many", allocator.allocate_many, n)
            assert len(taken) == n, f"Task 2.1: allocate_many({n}) returned {len(taken)} blocks"
            held.extend(taken)
            shared = held[rng.randrange(len(held))]
            call("share", allocator.share, shared)  # a second owner ...
            copy = call("copy_on_write", allocator.copy_on_write, shared)  # ... writes: it moves to a fresh block
            assert copy != shared, "Task 2.1: copy_on_write of a shared block must give a fresh block"
            assert call("copy_on_write", allocator.copy_on_write, copy) == copy, "Task 2.1: an unshared block is written in place"
            call("free", allocator.free, copy)  # that owner is done
            used, free = call("num_used", lambda: allocator.num_used), call("num_free", lambda: allocator.num_free)
            assert used == len(held) and free == POOL_BLOCKS - len(held), (
                f"Task 2.1: num_used {used:,} and num_free {free:,}, but {len(held):,} of {POOL_BLOCKS:,} blocks are held"
            )

    cycles("freeing, allocating, sharing and writing with half the pool held")
    walked[0] = "the free list"
    rng.shuffle(held)
    while len(held) > HELD_BLOCKS - RETURNED_BLOCKS:
        within_budget(f"giving back {RETURNED_BLOCKS:,} blocks in random order ({HELD_BLOCKS - len(held):,} done)")
        before = time.process_time()
        for _ in range(1_000):
            allocator.free(held.pop())
        spent["free"] += time.process_time() - before
        calls["free"] += 1_000
    cycles(f"freeing, allocating, sharing and writing after {RETURNED_BLOCKS:,} blocks were given back")
    within_budget(f"finishing the cycles after {RETURNED_BLOCKS:,} blocks were given back")
