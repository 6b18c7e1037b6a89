"""Block tables and slot mappings: from a token's position to its slot in the pool.

A request's block table is a plain list of block ids: its token at position
p lives in block `table[p // block_size]`, at offset `p % block_size`, which
is slot `table[p // block_size] * block_size + p % block_size` of the flat
pool. The table grows by one block each time the request crosses a block
boundary, so a request holds at most block_size - 1 slots it does not use.
"""

from __future__ import annotations

from miniyaie.paged.allocator import BlockAllocator


# ANCHOR: blocks_needed
def blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` tokens (the last one may be partly empty)."""
    # Hint: a ceiling division: 16 tokens in blocks of 16 need 1 block, 17 need 2, 0 need 0.
    # BEGIN SOLUTION 2.3: Grow a block table
    return -(-num_tokens // block_size)
    # END SOLUTION
# ANCHOR_END: blocks_needed


# ANCHOR: grow_block_table
def grow_block_table(table: list[int], num_tokens: int, block_size: int, allocator: BlockAllocator) -> list[int]:
    """Append blocks to `table` until it holds `num_tokens` tokens; returns the blocks added.

    A table that already holds that many is left as it is (tables never
    shrink here). All or nothing: when the allocator cannot give every
    missing block, OutOfBlocksError is raised and `table` is unchanged.
    """
    # Hint: compare blocks_needed(num_tokens, block_size) with len(table); take
    # the missing ones with allocator.allocate_many (all or nothing), extend
    # the table in place and return them.
    # BEGIN SOLUTION 2.3: Grow a block table
    missing = blocks_needed(num_tokens, block_size) - len(table)
    if missing <= 0:
        return []
    new_blocks = allocator.allocate_many(missing)
    table.extend(new_blocks)
    return new_blocks
    # END SOLUTION
# ANCHOR_END: grow_block_table


# ANCHOR: slot_mapping
def slot_mapping(table: list[int], start: int, end: int, block_size: int) -> list[int]:
    """The pool slots of positions start..end-1 of the request whose block table is `table`."""
    if not 0 <= start <= end <= len(table) * block_size:
        raise ValueError(
            f"positions {start}..{end - 1} are outside a table of {len(table)} blocks of {block_size} slots"
        )
    # Hint: position p is in block table[p // block_size] at offset p % block_size;
    # that block's first slot is block * block_size.
    # BEGIN SOLUTION 2.4: Slot mapping
    return [table[p // block_size] * block_size + p % block_size for p in range(start, end)]
    # END SOLUTION
# ANCHOR_END: slot_mapping
