"""Task 2.2: block tables that grow token by token, the slot of every position, a step's metadata."""

import random

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.model import AttentionMetadata
from miniyaie.paged import BlockAllocator, OutOfBlocksError, attention_metadata, blocks_needed, grow_block_table, slot_mapping
from refusals import refused

block_sizes = st.one_of(st.sampled_from([1, 7, 16]), st.integers(1, 40))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@pytest.mark.task("2.2")
@given(num_tokens=st.integers(0, 500), block_size=block_sizes)
@example(num_tokens=0, block_size=16)  # nothing to hold
@example(num_tokens=1, block_size=1)
@example(num_tokens=32, block_size=16)  # ends exactly on a block boundary
@example(num_tokens=33, block_size=16)  # one token into the next block
def test_blocks_needed_is_the_fewest_blocks_that_hold_the_tokens(num_tokens, block_size):
    n = blocks_needed(num_tokens, block_size)
    assert n * block_size >= num_tokens, f"Task 2.2: blocks_needed({num_tokens}, {block_size}) = {n}, but {n} blocks of {block_size} cannot hold {num_tokens} tokens"
    assert n == 0 or (n - 1) * block_size < num_tokens, f"Task 2.2: blocks_needed({num_tokens}, {block_size}) = {n}, but {n - 1} blocks of {block_size} already hold {num_tokens} tokens"


@pytest.mark.task("2.2")
@given(num_blocks=st.integers(1, 12), block_size=block_sizes, chunks=st.lists(st.integers(0, 20), max_size=12))
@example(num_blocks=3, block_size=1, chunks=[1, 1, 1, 1])  # block size 1: a block per token, then full
@example(num_blocks=4, block_size=16, chunks=[16, 1, 15])  # ends exactly on block boundaries
@example(num_blocks=2, block_size=7, chunks=[14])  # the pool exactly full
@example(num_blocks=2, block_size=7, chunks=[10, 5])  # does not fit: clear error, nothing changed
def test_block_table_grows_token_by_token(num_blocks, block_size, chunks):
    allocator = BlockAllocator(num_blocks)
    table: list[int] = []
    tokens = 0
    for chunk in chunks:
        target = tokens + chunk
        before, free_before = list(table), allocator.num_free
        if ceil_div(target, block_size) - len(table) > free_before:
            refused(OutOfBlocksError, lambda: grow_block_table(table, target, block_size, allocator),
                    f"Task 2.2: growing a table of {len(before)} blocks to {target} tokens in blocks of {block_size} "
                    f"needs more than the {free_before} free block(s): grow_block_table must raise OutOfBlocksError")
            assert table == before and allocator.num_free == free_before, (
                f"Task 2.2: a refused grow changed the table {before} -> {table} or the free blocks {free_before} -> {allocator.num_free}"
            )
            continue
        added = grow_block_table(table, target, block_size, allocator)
        assert table == before + added, f"Task 2.2: grow_block_table returned {added}, the table went {before} -> {table}: old entries stay where they were; the new blocks go at the end"
        assert len(table) == ceil_div(target, block_size), (
            f"Task 2.2: {target} tokens in blocks of {block_size}: the table holds {len(table)} blocks, not exactly the ones needed"
        )
        assert len(set(table)) == len(table) and allocator.num_used == len(table), (
            f"Task 2.2: the table {table} holds a block twice, or the allocator has {allocator.num_used} blocks in use "
            "for it: each block of a table is taken once from the allocator"
        )
        again = grow_block_table(table, tokens, block_size, allocator)
        assert again == [] and len(table) == ceil_div(target, block_size), (
            f"Task 2.2: growing the table to {tokens} tokens, fewer than it holds, added {again} and left {table}: "
            "a table that already holds the tokens is left as it is (tables never shrink here)"
        )
        tokens = target


@pytest.mark.task("2.2")
@given(
    table=st.lists(st.integers(0, 63), min_size=1, max_size=8, unique=True),
    block_size=block_sizes,
    bounds=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
@example(table=[5, 0, 3], block_size=1, bounds=(0.0, 1.0))  # block size 1: slot = block id
@example(table=[2, 9], block_size=16, bounds=(0.0, 1.0))  # the table exactly full: ends on a block boundary
@example(table=[2, 9], block_size=16, bounds=(0.5, 0.5))  # an empty range
@example(table=[7], block_size=7, bounds=(0.99, 1.0))  # the last slot alone
def test_slot_mapping_puts_each_position_in_its_block(table, block_size, bounds):
    capacity = len(table) * block_size
    start, end = sorted(round(b * capacity) for b in bounds)
    slots = slot_mapping(table, start, end, block_size)
    where = f"slot_mapping({table}, {start}, {end}, {block_size}) = {slots}"
    assert len(slots) == end - start, f"Task 2.2: {where}: one slot per position, {end - start} in all"
    for position, slot in zip(range(start, end), slots):
        assert slot // block_size == table[position // block_size], (
            f"Task 2.2: {where}: position {position}'s slot {slot} is not in the block the table names for it"
        )
        assert slot % block_size == position % block_size, (
            f"Task 2.2: {where}: position {position}'s slot {slot} is not at the position's offset in its block"
        )
    assert len(set(slots)) == len(slots), f"Task 2.2: {where}: two positions share a slot"
    # the reader (chapter 0's AttentionMetadata.context_slots) finds tokens exactly where the writer put them
    meta = AttentionMetadata([end], [end], torch.tensor(slots), torch.tensor([table]), block_size)
    read = meta.context_slots(0).tolist()[start:]
    assert read == slots, f"Task 2.2: {where}, but chapter 0's context_slots reads these positions at {read}"


@pytest.mark.task("2.2")
def test_slot_mapping_of_a_scattered_table():
    for args, expected in ((([3, 0, 2], 0, 6, 2), [6, 7, 0, 1, 4, 5]), (([3, 0, 2], 3, 5, 2), [1, 4]),
                           (([4, 1], 0, 2, 1), [4, 1])):
        got = slot_mapping(*args)
        assert got == expected, f"Task 2.2: slot_mapping{args} = {got}, not {expected}: the blocks of a scattered table"
    refused(ValueError, lambda: slot_mapping([3, 0, 2], 0, 7, 2),
            "Task 2.2: slot_mapping([3, 0, 2], 0, 7, 2) must raise ValueError: position 6 has no block in the table")


@pytest.mark.task("2.2")
@given(
    block_size=st.sampled_from([1, 3, 16]),
    steps=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 20)), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
@example(block_size=16, steps=[(0, 16), (31, 1)], seed=0)  # a prefill ending on a boundary, a decode
@example(block_size=3, steps=[(5, 4)], seed=1)  # a chunk starting and ending mid-block
def test_attention_metadata_lines_up_queries_slots_and_tables(block_size, steps, seed):
    rng = random.Random(seed)
    batch, tables = [], []
    free = list(range(200))
    rng.shuffle(free)  # blocks anywhere in the pool, in any order
    for i, (start, n) in enumerate(steps):
        table = [free.pop() for _ in range(-(-(start + n) // block_size))]
        batch.append((f"r{i}", start, start + n))
        tables.append(table)
    meta = attention_metadata(tables, batch, block_size)
    assert meta.query_lens == [n for _, n in steps], f"Task 2.2: query_lens {meta.query_lens} of the batch {batch}; query_lens: each request's new tokens, in batch order"
    assert meta.seq_lens == [start + n for start, n in steps], f"Task 2.2: seq_lens {meta.seq_lens} of the batch {batch}; seq_lens: cached + new tokens of each request"
    expected_slots = [
        table[p // block_size] * block_size + p % block_size for table, (_, start, end) in zip(tables, batch) for p in range(start, end)
    ]
    assert meta.slot_mapping.tolist() == expected_slots, f"Task 2.2: slot_mapping of the batch {batch}, tables {tables}: every new token's slot, request after request"
    width = max(len(t) for t in tables)
    assert list(meta.block_tables.shape) == [len(steps), width], f"Task 2.2: block_tables of shape {list(meta.block_tables.shape)} for the tables {tables}: one row per request, as wide as the longest table"
    for row, table in zip(meta.block_tables.tolist(), tables):
        assert row == table + [0] * (width - len(table)), f"Task 2.2: the row {row} for the table {table}: each row is the request's table, padded with block 0"
    assert meta.block_size == block_size, f"Task 2.2: block_size {meta.block_size} in the metadata, not {block_size}"
    assert meta.slot_mapping.dtype == meta.block_tables.dtype == torch.int64, (
        f"Task 2.2: slot_mapping is {meta.slot_mapping.dtype}, block_tables {meta.block_tables.dtype}: index tensors are int64"
    )


@pytest.mark.task("2.2")
def test_attention_metadata_of_a_table_holding_blocks_ahead():
    """The example of attention_metadata's contract: a table may hold blocks past `end` (slots taken ahead for drafts,
    chapter 9); its row keeps them, and the rows are as wide as the longest table."""
    meta = attention_metadata([[3, 1, 5], [2]], [("a", 2, 5), ("b", 0, 1)], 3)
    got = (meta.query_lens, meta.seq_lens, meta.slot_mapping.tolist(), meta.block_tables.tolist())
    expected = ([3, 1], [5, 1], [11, 3, 4, 6], [[3, 1, 5], [2, 0, 0]])
    names = ("query_lens", "seq_lens", "slot_mapping", "block_tables")
    wrong = [f"{name} {g}, not {e}" for name, g, e in zip(names, got, expected) if g != e]
    assert not wrong, (
        "Task 2.2: attention_metadata(tables [[3, 1, 5], [2]], batch [('a', 2, 5), ('b', 0, 1)], block size 3) gives "
        + "; ".join(wrong) + ". A row holds the request's whole table (block 5 too, taken ahead), then block 0, "
        "as wide as the longest table"
    )


@pytest.mark.task("2.2")
def test_attention_metadata_puts_its_tensors_on_the_device_asked():
    """The runner asks for the step's metadata on the model's device ("meta" stands in for a GPU here)."""
    meta = attention_metadata([[3, 1], [2]], [("a", 2, 5), ("b", 0, 1)], 3, device="meta")
    wrong = {name: str(t.device) for name, t in (("slot_mapping", meta.slot_mapping), ("block_tables", meta.block_tables))
             if t.device.type != "meta"}
    assert not wrong, (
        f"Task 2.2: attention_metadata(..., device='meta') must put its tensors on that device, the pool's device, "
        f"but {', '.join(f'{name} is on {device}' for name, device in wrong.items())}: on a GPU, the attention "
        "kernel would read them from the CPU"
    )
