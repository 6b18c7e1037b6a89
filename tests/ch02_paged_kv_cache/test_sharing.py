"""Task 2.3 (sharing): a request starts on blocks another owner filled (share_blocks, fork): references, never copies, until it writes into one.

Needs only the allocator (Task 2.1): the blocks are taken from the memory's
allocator directly, as chapter 3's prefix cache does.
"""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.paged import PagedMemory
from miniyaie.scheduler import Request
from refusals import refused


@pytest.mark.task("2.3")
@given(num_blocks=st.integers(1, 8), taken=st.integers(1, 8), children=st.integers(1, 3))
@example(num_blocks=4, taken=4, children=2)  # every block shared, by three owners each
def test_shared_blocks_gain_one_reference_per_owner_and_cost_nothing(num_blocks, taken, children):
    memory = PagedMemory(num_blocks, block_size=4)
    blocks = memory.allocator.allocate_many(min(taken, num_blocks))  # filled by someone else (one owner)
    free = memory.num_free_blocks
    memory.share_blocks("first", blocks)
    assert memory.block_table("first") == blocks, "Task 2.3: the table starts with the shared blocks, in order"
    for i in range(children):
        memory.fork("first", f"child-{i}")
        assert memory.block_table(f"child-{i}") == blocks, "Task 2.3: a fork starts on the parent's blocks"
    assert memory.num_free_blocks == free, "Task 2.3: sharing takes no block from the pool"
    for block in blocks:
        assert memory.allocator.ref_count(block) == 2 + children, (
            f"Task 2.3: block {block}: one reference for the original owner, one for 'first', one per child"
        )
    blocks.append(-1)  # the caller's list is not the request's table
    assert -1 not in memory.block_table("first"), "Task 2.3: share_blocks keeps its own copy of the list"


@pytest.mark.task("2.3")
def test_sharing_refuses_what_would_leak_or_make_no_sense():
    memory = PagedMemory(4, block_size=4)
    a, b = memory.allocator.allocate_many(2)
    memory.share_blocks("r", [a])
    refused(ValueError, lambda: memory.share_blocks("r", [b]),
            f"Task 2.3: share_blocks('r', [{b}]) when 'r' already holds [{a}] must raise ValueError: its first table would "
            "leak (nobody would ever drop those references)")
    assert memory.block_table("r") == [a] and memory.allocator.ref_count(b) == 1, "Task 2.3: a refused share changes nothing"
    refused(KeyError, lambda: memory.fork("nobody", "child"),
            "Task 2.3: fork('nobody', 'child') of a parent that holds no blocks must raise KeyError")
    assert memory.block_table("child") == [], "Task 2.3: a refused fork gives the child no table"
    empty = Request("empty", [1], max_tokens=1)
    memory.allocate(empty, 0)  # a table holding no block
    memory.share_blocks("empty", [a])
    assert memory.block_table("empty") == [a], (
        f"Task 2.3: share_blocks('empty', [{a}]) of a request whose table is empty (allocate(request, 0)) must start its "
        f"table on [{a}]: an empty table holds no blocks, so nothing leaks; the table is {memory.block_table('empty')}"
    )
    memory.free(empty)
    (free_block,) = [x for x in range(4) if x not in (a, b)][:1]
    refused(ValueError, lambda: memory.share_blocks("s", [free_block]),
            f"Task 2.3: share_blocks('s', [{free_block}]) of a free block (nobody filled it) must raise ValueError")


@pytest.mark.task("2.3")
@given(num_used=st.integers(1, 5), free_at=st.integers(0, 5))
@example(num_used=4, free_at=2)  # the free block in the middle: two shares taken before it, two after
@example(num_used=3, free_at=3)  # the free block last
def test_sharing_a_list_with_a_free_block_takes_no_reference_at_all(num_used, free_at):
    """All or nothing: a share_blocks that takes references one by one and stops at the free block leaks them."""
    memory = PagedMemory(8, block_size=4)
    used = memory.allocator.allocate_many(num_used)
    free_block = next(b for b in range(8) if b not in used)
    blocks = used[:free_at] + [free_block] + used[free_at:]
    refused(ValueError, lambda: memory.share_blocks("r", blocks),
            f"Task 2.3: share_blocks('r', {blocks}) must raise ValueError: block {free_block} is free (nobody filled it)")
    counts = {b: memory.allocator.ref_count(b) for b in blocks}
    assert counts == {**{b: 1 for b in used}, free_block: 0}, (
        f"Task 2.3: reference counts after a refused share_blocks({blocks}): {counts}; every block in use must keep its one "
        "owner (a reference taken before the free block was found leaks: nobody will ever drop it)"
    )
    assert memory.block_table("r") == [], "Task 2.3: a refused share gives the request no table"
    memory.share_blocks("r", used)  # the request still holds nothing, so it may start on the blocks in use
    assert memory.block_table("r") == used


@pytest.mark.task("2.3")
@given(block_size=st.sampled_from([1, 2, 4, 7]), num_shared=st.integers(1, 6), start=st.integers(0, 42), length=st.integers(0, 14))
@example(block_size=4, num_shared=3, start=4, length=4)  # the write ends on a block boundary, the table goes on past it
@example(block_size=4, num_shared=2, start=5, length=1)  # one token in the middle of a shared block
@example(block_size=4, num_shared=2, start=6, length=8)  # into the last shared block, then past the table
def test_a_write_copies_exactly_the_shared_blocks_its_positions_land_in(block_size, num_shared, start, length):
    """A request on blocks filled by another owner (chapter 3 starts one on a cached prefix like this) writes
    positions start..end-1: the shared blocks holding one of them are copied; the others, before or after, stay shared."""
    start = min(start, num_shared * block_size)  # the request's computed tokens lie in the blocks it starts on
    end = start + length
    memory = PagedMemory(2 * num_shared + end + 1, block_size)  # room for every copy and every new block
    blocks = memory.allocator.allocate_many(num_shared)  # filled by someone else (one owner)
    memory.share_blocks("r", blocks)
    written = [i for i in range(num_shared) if any(p // block_size == i for p in range(start, end))]
    assert list(memory._blocks_written(memory.block_table("r"), start, end)) == written, (
        f"Task 2.3: positions {start}..{end - 1} in blocks of {block_size} write into table indexes {written} of the "
        f"{num_shared} blocks the table has (chapter 3 counts copies with _blocks_written)"
    )
    request = Request("r", [0] * max(end, 1), max_tokens=1)
    request.num_computed_tokens = start
    memory.allocate(request, length)
    copies = memory.take_block_copies()
    assert [src for src, _ in copies] == [blocks[i] for i in written], (
        f"Task 2.3: writing positions {start}..{end - 1} (blocks of {block_size}) into a table of {num_shared} shared blocks "
        f"copied {[src for src, _ in copies]}, not {[blocks[i] for i in written]}: only a shared block that one of "
        "the positions lands in may be copied"
    )
    table = memory.block_table("r")
    for i, block in enumerate(blocks):
        assert (table[i] == block) == (i not in written), f"Task 2.3: table index {i}: shared unless written into"
