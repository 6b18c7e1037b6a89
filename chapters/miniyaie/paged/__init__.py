"""Chapter 2: the paged KV cache — blocks, block tables, slot mapping, copy-on-write."""

from miniyaie.paged.allocator import BlockAllocator, OutOfBlocksError
from miniyaie.paged.block_table import attention_metadata, blocks_needed, grow_block_table, slot_mapping
from miniyaie.paged.memory import PagedMemory
from miniyaie.paged.pool import block_bytes, copy_blocks, make_pool, num_blocks_for_budget

__all__ = [
    "BlockAllocator", "OutOfBlocksError",
    "attention_metadata", "blocks_needed", "grow_block_table", "slot_mapping",
    "PagedMemory",
    "block_bytes", "copy_blocks", "make_pool", "num_blocks_for_budget",
]
