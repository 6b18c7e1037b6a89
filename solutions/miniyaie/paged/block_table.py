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
    # Nudge: which block does the last token land in?
    # Hint 1: Every block holds block_size tokens and only the last may be partly filled: 16 tokens
    #   in blocks of 16 need 1 block, 17 need 2, 0 need 0.
    # Hint 2: Divide rounding up. In integers, -(-a // b) rounds up without floats.
    # Hint 3:
    #   return -(-num_tokens // block_size)      # or (num_tokens + block_size - 1) // block_size
    # BEGIN SOLUTION 2.2: Block tables, slots and the pool
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
    # Nudge: what must the table look like when the pool cannot give everything?
    # Hint 1: The table only ever grows, by whole blocks, and only when the tokens reach a block it
    #   does not have yet. All or nothing: if the pool cannot give every missing block, the
    #   table must be exactly as it was (allocate_many already behaves that way).
    # Hint 2: Count the missing blocks: blocks_needed(num_tokens, block_size) minus the table's
    #   length. None missing (or fewer tokens than the table holds): return []. Otherwise take
    #   them with allocator.allocate_many, append them to the table in place, return them.
    # Hint 3:
    #   missing = blocks_needed(num_tokens, block_size) - len(table)
    #   if missing <= 0: return []
    #   new = allocator.allocate_many(missing); table.extend(new); return new
    # BEGIN SOLUTION 2.2: Block tables, slots and the pool
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
    # Nudge: the block table is a page table.
    # Hint 1: Blocks can lie anywhere in the pool and in any order; only the table knows where.
    #   Positions fill the table's blocks in order, block_size each: the reader you wrote in
    #   Task 0.4 (context_slots) walks the same table the same way.
    # Hint 2: A position's block is the table entry for its block number (p // block_size), and
    #   the position sits at offset p % block_size inside it. For each position from start to
    #   end - 1: look up its block in the table, multiply by block_size to get the block's first
    #   slot, add the offset.
    # Hint 3:
    #   return [table[p // block_size] * block_size + p % block_size for p in range(start, end)]
    # BEGIN SOLUTION 2.2: Block tables, slots and the pool
    return [table[p // block_size] * block_size + p % block_size for p in range(start, end)]
    # END SOLUTION
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
    # Nudge: everything chapter 0's backend needs, read off the block tables.
    # Hint 1: One row per request, in the batch's order, so that the packed tokens, their
    #   slots and the tables line up. A tensor needs rows of one length: pad every table
    #   with block 0 to the longest. Why 0: a kernel may read a whole row, so the padding
    #   must be a block every pool has (-1 would index outside the pool), and it is harmless,
    #   since a sequence uses only the first ceil(seq_len / block_size) entries of its row.
    # Hint 2: query_lens are end - start and seq_lens are end, request by request. The slot
    #   mapping concatenates slot_mapping(table, start, end, block_size) over the batch. Pad
    #   each table with 0s to the longest length. Build AttentionMetadata with int64 tensors
    #   on `device` and block_size.
    # Hint 3:
    #   width = max(len(t) for t in tables)
    #   slots = [s for t, (_, start, end) in zip(tables, batch) for s in slot_mapping(t, start, end, block_size)]
    #   return AttentionMetadata(query_lens=[end - start, ...], seq_lens=[end, ...],
    #       slot_mapping=tensor(slots, int64), block_tables=tensor([t + [0] * (width - len(t)), ...], int64),
    #       block_size=block_size)
    # BEGIN SOLUTION 2.2: Block tables, slots and the pool
    width = max(len(t) for t in tables)
    slots = [s for table, (_, start, end) in zip(tables, batch) for s in slot_mapping(table, start, end, block_size)]
    return AttentionMetadata(
        query_lens=[end - start for _, start, end in batch],
        seq_lens=[end for _, _, end in batch],
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        # padding with block 0 is harmless: a sequence reads only its first ceil(seq_len / block_size) entries
        block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int64, device=device),
        block_size=block_size,
    )
    # END SOLUTION
# ANCHOR_END: attention_metadata
