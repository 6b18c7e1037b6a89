"""Task 2.2: block tables that grow token by token, the slot of every position, a step's metadata."""

import random

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.model import AttentionMetadata
from miniyaie.paged import BlockAllocator, OutOfBlocksError, attention_metadata, blocks_needed, grow_block_table, slot_mapping

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
    assert n * block_size >= num_tokens, f"{n} blocks of {block_size} cannot hold {num_tokens} tokens"
    assert n == 0 or (n - 1) * block_size < num_tokens, f"{n - 1} blocks of {block_size} already hold {num_tokens} tokens"


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
            with pytest.raises(OutOfBlocksError):
                grow_block_table(table, target, block_size, allocator)
            assert table == before and allocator.num_free == free_before, (
                f"a refused grow changed the table {before} -> {table} or the free blocks {free_before} -> {allocator.num_free}"
            )
            continue
        added = grow_block_table(table, target, block_size, allocator)
        assert table == before + added, "old entries stay where they were; the new blocks go at the end"
        assert len(table) == ceil_div(target, block_size), (
            f"{target} tokens in blocks of {block_size}: the table holds {len(table)} blocks, not exactly the ones needed"
        )
        assert len(set(table)) == len(table) and allocator.num_used == len(table)
        assert grow_block_table(table, tokens, block_size, allocator) == [] and len(table) == ceil_div(target, block_size)
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
    assert len(slots) == end - start
    for position, slot in zip(range(start, end), slots):
        assert slot // block_size == table[position // block_size], f"position {position}: slot {slot} is not in its block"
        assert slot % block_size == position % block_size, f"position {position}: slot {slot} is not at its offset"
    assert len(set(slots)) == len(slots)
    # the reader (chapter 0's AttentionMetadata.context_slots) finds tokens exactly where the writer put them
    meta = AttentionMetadata([end], [end], torch.tensor(slots), torch.tensor([table]), block_size)
    assert meta.context_slots(0).tolist()[start:] == slots


@pytest.mark.task("2.2")
def test_slot_mapping_of_a_scattered_table():
    assert slot_mapping([3, 0, 2], 0, 6, 2) == [6, 7, 0, 1, 4, 5]
    assert slot_mapping([3, 0, 2], 3, 5, 2) == [1, 4]
    assert slot_mapping([4, 1], 0, 2, 1) == [4, 1]
    with pytest.raises(ValueError):
        slot_mapping([3, 0, 2], 0, 7, 2)  # position 6 has no block


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
    assert meta.query_lens == [n for _, n in steps], "query_lens: each request's new tokens, in batch order"
    assert meta.seq_lens == [start + n for start, n in steps], "seq_lens: cached + new tokens of each request"
    expected_slots = [
        table[p // block_size] * block_size + p % block_size for table, (_, start, end) in zip(tables, batch) for p in range(start, end)
    ]
    assert meta.slot_mapping.tolist() == expected_slots, "slot_mapping: every new token's slot, request after request"
    width = max(len(t) for t in tables)
    assert list(meta.block_tables.shape) == [len(steps), width], "one row per request, as wide as the longest table"
    for row, table in zip(meta.block_tables.tolist(), tables):
        assert row == table + [0] * (width - len(table)), "each row is the request's table, padded with block 0"
    assert meta.block_size == block_size
    assert meta.slot_mapping.dtype == meta.block_tables.dtype == torch.int64, "index tensors are int64"


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
