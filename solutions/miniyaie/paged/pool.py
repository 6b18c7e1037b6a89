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
    # Nudge: what does one block cost, and can a pool hold part of a block?
    # Hint 1: A block is K and V of block_size tokens in every layer, so its size in bytes is
    #   fixed by the model's shape and the dtype. Whole blocks only: round down.
    # Hint 2: Bytes of one token: config.kv_bytes_per_token(dtype.itemsize) (K and V, every
    #   layer). Bytes of one block: that times block_size. Integer-divide the budget by it; no
    #   whole block fitting is the ValueError, with a message giving the budget and a block's size.
    # Hint 3:
    #   num_blocks = budget_bytes // (block_size * config.kv_bytes_per_token(dtype.itemsize))
    #   if num_blocks < 1: raise ValueError(f"a KV budget of {budget_bytes} bytes holds no block ...")
    #   return num_blocks
    # BEGIN SOLUTION 2.2: Block tables, slots and the pool
    num_blocks = budget_bytes // (block_size * config.kv_bytes_per_token(dtype.itemsize))
    if num_blocks < 1:
        raise ValueError(
            f"a KV budget of {budget_bytes} bytes holds no block of {block_size} tokens "
            f"({block_bytes(config, block_size, dtype)} bytes each)"
        )
    return num_blocks
    # END SOLUTION
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
    # Nudge: the allocator speaks in blocks, the tensor in slots.
    # Hint 1: The pool is [num_layers, num_slots, kv_heads, head_dim] for K and for V; block b owns
    #   slots b * block_size .. (b + 1) * block_size - 1 of every layer. A copy of a block is a
    #   copy of those slots, in every layer, for K and for V. A loop over the pairs is wrong
    #   when a destination is a later pair's source (that pair would read the new contents):
    #   read every source first, then write. One indexed copy does all pairs at once.
    # Hint 2: Build the slot indexes of all source blocks (each block id times block_size plus
    #   arange(block_size), flattened) and, in the same order, of all destination blocks. Then
    #   assign pool.k[:, dst_slots] = pool.k[:, src_slots], and the same for pool.v. Make the
    #   index tensors on the pool's device.
    # Hint 3:
    #   offsets = arange(block_size)
    #   src = (tensor(sources)[:, None] * block_size + offsets).flatten()
    #   dst = (tensor(destinations)[:, None] * block_size + offsets).flatten()
    #   pool.k[:, dst] = pool.k[:, src]; pool.v[:, dst] = pool.v[:, src]
    # BEGIN SOLUTION 2.2: Block tables, slots and the pool
    device = pool.k.device
    offsets = torch.arange(block_size, device=device)
    src = (torch.tensor([s for s, _ in copies], device=device)[:, None] * block_size + offsets).flatten()
    dst = (torch.tensor([d for _, d in copies], device=device)[:, None] * block_size + offsets).flatten()
    pool.k[:, dst] = pool.k[:, src]
    pool.v[:, dst] = pool.v[:, src]
    # END SOLUTION
# ANCHOR_END: copy_blocks
