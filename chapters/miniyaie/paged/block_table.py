"""Block tables and slot mappings: from a token's position to its slot in the pool.

A request's block table is a plain list of block ids, in position order:
the layout is the one chapter 0's reader (`AttentionMetadata.context_slots`)
already reads. A table takes a block only when a token reaches it. A step's
`AttentionMetadata` is read off the tables of its requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from miniyaie.model import AttentionMetadata
from miniyaie.paged.allocator import BlockAllocator


# ANCHOR: blocks_needed
def blocks_needed(num_tokens: int, block_size: int) -> int:
    """The fewest blocks of `block_size` slots that hold `num_tokens` tokens.

    n = blocks_needed(num_tokens, block_size) holds them (n blocks of
    block_size slots have room for num_tokens tokens) and n - 1 blocks would
    not. Examples (asserted): 0 tokens need 0 blocks; 16 tokens in blocks
    of 16 need 1 block, 17 need 2.
    """
    # Idea: which block does the last token land in?
    # Stuck? `miniyaie hint 2.2` prints hints, one level at a time.
    # TODO(Task 2.2): Block tables, slots and the pool. Replace this line with your code.
    raise NotImplementedError('Chapter 2, Task 2: Block tables, slots and the pool — see book/src/ch02_paged_kv_cache.md')
# ANCHOR_END: blocks_needed


# ANCHOR: grow_block_table
def grow_block_table(table: list[int], num_tokens: int, block_size: int, allocator: BlockAllocator) -> list[int]:
    """Append blocks to `table` until it holds `num_tokens` tokens; returns the blocks added.

    A table that already holds that many is left as it is (tables never
    shrink here). All or nothing: when the allocator cannot give every
    missing block, OutOfBlocksError is raised and `table` is unchanged.
    """
    # Idea: what must the table look like when the pool cannot give everything?
    # Stuck? `miniyaie hint 2.2` prints hints, one level at a time.
    # TODO(Task 2.2): Block tables, slots and the pool. Replace this line with your code.
    raise NotImplementedError('Chapter 2, Task 2: Block tables, slots and the pool — see book/src/ch02_paged_kv_cache.md')
# ANCHOR_END: grow_block_table


# ANCHOR: slot_mapping
def slot_mapping(table: list[int], start: int, end: int, block_size: int) -> list[int]:
    """The pool slots of positions start..end-1 of the request whose block table is `table`, in order.

    Writer and reader agree: these are the slots where chapter 0's
    `AttentionMetadata.context_slots` finds positions start..end-1 of a
    sequence whose block table row is `table` (the tests check both, on
    scattered tables). Positions outside the table's blocks are a ValueError.
    Example (asserted): table [3, 0, 2] in blocks of 2 puts positions 0..5
    in slots [6, 7, 0, 1, 4, 5].
    """
    if not 0 <= start <= end <= len(table) * block_size:
        raise ValueError(
            f"positions {start}..{end - 1} are outside a table of {len(table)} blocks of {block_size} slots"
        )
    # Idea: the block table is a page table.
    # Stuck? `miniyaie hint 2.2` prints hints, one level at a time.
    # TODO(Task 2.2): Block tables, slots and the pool. Replace this line with your code.
    raise NotImplementedError('Chapter 2, Task 2: Block tables, slots and the pool — see book/src/ch02_paged_kv_cache.md')
# ANCHOR_END: slot_mapping


# ANCHOR: attention_metadata
def attention_metadata(
    tables: Sequence[list[int]], batch: Sequence[tuple[str, int, int]], block_size: int,
    device: str | torch.device = "cpu",
) -> AttentionMetadata:
    """The metadata of a step that computes positions start..end-1 of each (request_id, start, end).

    tables[i] is the block table of batch[i]'s request; it already holds
    the request's `end` tokens (the memory allocated them) and may hold
    blocks past them (slots taken ahead). Each field means what chapter 0's
    AttentionMetadata says, for this step, with sequence i = batch[i]'s
    request: the backend writes the new K/V of the packed queries (request
    after request, in batch order) through slot_mapping, and reads sequence
    i's context through row i of block_tables (context_slots(i)); every
    token must be read where it was written. block_tables is one tensor:
    rows as wide as the longest table, row i holding tables[i] and then
    block 0 (a block every pool has; never read). Tensors int64, on `device`.

    Example (asserted): tables [[3, 1, 5], [2]], batch [("a", 2, 5),
    ("b", 0, 1)], block_size 3 give query_lens [3, 1], seq_lens [5, 1],
    slot_mapping [11, 3, 4, 6] and block_tables [[3, 1, 5], [2, 0, 0]].
    """
    # Idea: everything chapter 0's backend needs, read off the block tables.
    # Stuck? `miniyaie hint 2.2` prints hints, one level at a time.
    # TODO(Task 2.2): Block tables, slots and the pool. Replace this line with your code.
    raise NotImplementedError('Chapter 2, Task 2: Block tables, slots and the pool — see book/src/ch02_paged_kv_cache.md')
# ANCHOR_END: attention_metadata
