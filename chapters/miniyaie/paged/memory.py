"""PagedMemory: the scheduler's KV memory (chapter 1's `KVMemory`), on blocks.

The scheduler asks the same three questions as in chapter 1 (can this
request grow by N tokens? grow it; free it) and never sees a block. Behind
them every request has a block table; the model runner asks for block tables
and slot mappings to build each step's `AttentionMetadata`.

Sharing. `fork` gives a child request the parent's blocks (one more owner
each), for parallel sampling; chapter 3 starts requests on the blocks of a
cached prefix the same way (`share_blocks`). A shared block is read-only:
when `allocate` is asked to make room for tokens that land in a shared
block, it gives the request its own copy of that block (copy-on-write) and
queues the (src, dst) pair. Before the forward pass that writes those tokens
the runner must apply the queued copies to the pool:

    copy_blocks(pool, memory.take_block_copies(), memory.block_size)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from miniyaie.model import AttentionMetadata
from miniyaie.paged.allocator import BlockAllocator, OutOfBlocksError
from miniyaie.paged.block_table import blocks_needed, grow_block_table, slot_mapping

if TYPE_CHECKING:
    from miniyaie.scheduler import Request


class PagedMemory:
    """KV memory as a pool of `num_blocks` blocks of `block_size` tokens."""

    def __init__(self, num_blocks: int, block_size: int):
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.block_size = block_size
        self.allocator = BlockAllocator(num_blocks)
        self.tables: dict[str, list[int]] = {}  # request id -> block table
        self._copies: list[tuple[int, int]] = []  # copy-on-write (src, dst) not yet applied

    # ------------------------------------------------------------ counters
    @property
    def capacity_tokens(self) -> int:
        return self.allocator.num_blocks * self.block_size

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.allocator.num_free

    @property
    def num_used_blocks(self) -> int:
        return self.allocator.num_used

    # ------------------------------------------------------------ the KVMemory interface
    def cached_prefix_len(self, request: Request) -> int:
        return 0  # no prefix cache here; chapter 3 adds one

    # ANCHOR: can_allocate
    def _blocks_written(self, table: list[int], start: int, end: int) -> range:
        """Indexes into `table` of the blocks that positions start..end-1 write into."""
        if end <= start:
            return range(0)
        return range(start // self.block_size, min(len(table), blocks_needed(end, self.block_size)))

    def _shared_blocks_to_write(self, table: list[int], start: int, end: int) -> list[int]:
        """Indexes into `table` of the blocks that positions start..end-1 write into and that others share."""
        return [i for i in self._blocks_written(table, start, end) if self.allocator.ref_count(table[i]) > 1]

    def can_allocate(self, request: Request, num_new_tokens: int) -> bool:
        """Whether the table of `request` can grow to num_computed_tokens + num_new_tokens tokens."""
        table = self.tables.get(request.request_id, [])
        start = request.num_computed_tokens
        end = start + num_new_tokens
        # Hint: the request needs a new block for every block its table lacks
        # to hold `end` tokens (blocks_needed), plus one for every shared
        # block it will write into (self._shared_blocks_to_write: each is
        # copied on write). It fits if that is no more than the free blocks.
        # TODO(Task 2.6): Paged memory for the scheduler. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 6: Paged memory for the scheduler — see book/src/ch02_paged_kv_cache.md')
    # ANCHOR_END: can_allocate

    # ANCHOR: allocate
    def allocate(self, request: Request, num_new_tokens: int) -> None:
        """Grow the table of `request` to hold num_computed_tokens + num_new_tokens tokens.

        Positions num_computed_tokens.. will be written: any shared block
        among them is replaced by a private copy first (queued for
        `take_block_copies`). Raises OutOfBlocksError, changing nothing,
        when the pool cannot hold it.
        """
        if not self.can_allocate(request, num_new_tokens):
            raise OutOfBlocksError(
                f"request {request.request_id!r} cannot grow by {num_new_tokens} tokens: "
                f"{self.allocator.num_free} of {self.allocator.num_blocks} blocks of {self.block_size} tokens are free"
            )
        table = self.tables.setdefault(request.request_id, [])
        start = request.num_computed_tokens
        end = start + num_new_tokens
        # Hint: for each shared block to write into, replace it in the table by
        # self.allocator.copy_on_write(block) and record (old, new) in
        # self._copies; then grow the table (grow_block_table) to hold `end` tokens.
        # TODO(Task 2.6): Paged memory for the scheduler. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 6: Paged memory for the scheduler — see book/src/ch02_paged_kv_cache.md')
    # ANCHOR_END: allocate

    def free(self, request: Request) -> None:
        """Drop the request's share of every block it holds (finished, aborted or preempted)."""
        for block in self.tables.pop(request.request_id, []):
            self.allocator.free(block)
        # a queued copy into a block nobody owns any more must not land on its next owner
        self._copies = [(src, dst) for src, dst in self._copies if self.allocator.ref_count(dst) > 0]

    # ------------------------------------------------------------ sharing
    # ANCHOR: sharing
    def share_blocks(self, request_id: str, blocks: Sequence[int]) -> None:
        """Start the table of `request_id` with `blocks`, already filled by another owner.

        The request takes one reference on each; it reads them freely and
        copies any of them on its first write into it. Used by `fork`, and by
        chapter 3 to start a request on a cached prefix.
        """
        if self.tables.get(request_id):
            raise ValueError(f"request {request_id!r} already holds blocks")
        for block in blocks:
            self.allocator.share(block)
        self.tables[request_id] = list(blocks)

    def fork(self, parent_request_id: str, child_request_id: str) -> None:
        """Give the child every block of the parent, shared (parallel sampling: n > 1).

        The child's request must have the parent's num_computed_tokens: the
        two continue from the same cached tokens and diverge from there.
        """
        if parent_request_id not in self.tables:
            raise KeyError(f"request {parent_request_id!r} holds no blocks")
        self.share_blocks(child_request_id, self.tables[parent_request_id])

    def take_block_copies(self) -> list[tuple[int, int]]:
        """The (src, dst) block copies queued by copy-on-write since the last call; apply them before the forward."""
        copies, self._copies = self._copies, []
        return copies
    # ANCHOR_END: sharing

    # ------------------------------------------------------------ for the model runner
    def block_table(self, request_id: str) -> list[int]:
        """The block ids of the request, in position order (a copy)."""
        return list(self.tables.get(request_id, []))

    def slot_mapping(self, request_id: str, start: int, end: int) -> list[int]:
        """The pool slots of the request's positions start..end-1."""
        return slot_mapping(self.tables.get(request_id, []), start, end, self.block_size)

    # ANCHOR: attention_metadata
    def attention_metadata(
        self, batch: Sequence[tuple[str, int, int]], device: str | torch.device = "cpu"
    ) -> AttentionMetadata:
        """The metadata of a step that computes positions start..end-1 of each (request_id, start, end)."""
        tables = [self.tables.get(rid, []) for rid, _, _ in batch]
        width = max(len(t) for t in tables)
        slots = [s for rid, start, end in batch for s in self.slot_mapping(rid, start, end)]
        return AttentionMetadata(
            query_lens=[end - start for _, start, end in batch],
            seq_lens=[end for _, _, end in batch],
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            # padding with block 0 is harmless: a sequence reads only its first ceil(seq_len / block_size) entries
            block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int64, device=device),
            block_size=self.block_size,
        )
    # ANCHOR_END: attention_metadata
