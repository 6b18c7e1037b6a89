"""The paged K/V pool: chapter 0's flat KVCache, cut into blocks.

The pool is one tensor for K and one for V, [num_layers, num_blocks *
block_size, num_kv_heads, head_dim]: a block is the block_size slots of
chapter 0's layout (`AttentionMetadata.context_slots`), in every layer. Nothing about the tensor changes
from chapter 0; only who gets which slots does. The attention backend writes
new K/V through the slot mapping and reads each sequence's context through
its block table (`AttentionMetadata.context_slots`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from miniyaie.model import KVCache, ModelConfig


def block_bytes(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of one block: K and V of block_size tokens in every layer."""
    return block_size * config.kv_bytes_per_token(dtype.itemsize)


# ANCHOR: budget
def num_blocks_for_budget(config: ModelConfig, budget_bytes: int, block_size: int, dtype: torch.dtype) -> int:
    """The most blocks whose K and V (all layers, `dtype`) fit in `budget_bytes`.

    A pool of that many blocks takes at most budget_bytes; one block more
    would not fit. A budget too small for one block is a ValueError.
    """
    # Idea: what does one block cost, and can a pool hold part of a block?
    # Stuck? `miniyaie hint 2.2` prints hints, one level at a time.
    # TODO(Task 2.2): Block tables, slots and the pool. Replace this line with your code.
    raise NotImplementedError('Chapter 2, Task 2: Block tables, slots and the pool — see book/src/ch02_paged_kv_cache.md')
# ANCHOR_END: budget


# ANCHOR: make_pool
def make_pool(
    config: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: str | torch.device = "cpu"
) -> KVCache:
    """The K/V pool of `num_blocks` blocks: a KVCache of num_blocks * block_size slots."""
    if num_blocks < 1 or block_size < 1:
        raise ValueError(f"a pool needs at least one block of at least one slot, got {num_blocks} x {block_size}")
    return KVCache(config, num_blocks * block_size, dtype, device)
# ANCHOR_END: make_pool


# ANCHOR: copy_blocks
def copy_blocks(pool: KVCache, copies: Iterable[tuple[int, int]], block_size: int) -> None:
    """Copy every (src, dst) block's K and V, all layers: what copy-on-write asks the runner to do.

    After the call, block dst of every layer holds what block src held
    before the call (its block_size slots, K and V); no other slot changes.
    The destinations are distinct; a destination may be another pair's
    source, earlier or later in the list: every pair reads its source as it
    was before the call. Examples (asserted): copies [(0, 1), (2, 0)] leave
    in block 1 what block 0 held, and in block 0 what block 2 held; copies
    [(0, 1), (1, 2)] leave in block 2 what block 1 held.
    """
    copies = list(copies)
    if not copies:
        return
    # Idea: the allocator speaks in blocks, the tensor in slots.
    # Stuck? `miniyaie hint 2.2` prints hints, one level at a time.
    # TODO(Task 2.2): Block tables, slots and the pool. Replace this line with your code.
    raise NotImplementedError('Chapter 2, Task 2: Block tables, slots and the pool — see book/src/ch02_paged_kv_cache.md')
# ANCHOR_END: copy_blocks
