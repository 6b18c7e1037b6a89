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
from miniyaie.paged.block_table import attention_metadata, blocks_needed, grow_block_table, slot_mapping

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
        """Which blocks of `table` a write of positions start..end-1 changes: their indexes into `table`, ascending.

        Only blocks the table already holds count (the ones it will take are
        fresh); nothing is written when end <= start. Chapter 3 counts these.
        """
        # Idea: which blocks does a write touch that could already be someone else's?
        # Stuck? `miniyaie hint 2.3` prints hints, one level at a time.
        # TODO(Task 2.3): PagedMemory: sharing, copy-on-write and the queue of copies. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 3: PagedMemory: sharing, copy-on-write and the queue of copies — see book/src/ch02_paged_kv_cache.md')

    def _shared_blocks_to_write(self, table: list[int], start: int, end: int) -> list[int]:
        """Of the blocks _blocks_written names, the ones another owner also holds: one entry each, ascending.

        Callers outside this class (chapter 3) only count them: whether an
        entry is an index into `table` or a block id is up to allocate.
        """
        # Idea: of the blocks this write changes, which could another owner see change?
        # Stuck? `miniyaie hint 2.3` prints hints, one level at a time.
        # TODO(Task 2.3): PagedMemory: sharing, copy-on-write and the queue of copies. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 3: PagedMemory: sharing, copy-on-write and the queue of copies — see book/src/ch02_paged_kv_cache.md')

    def can_allocate(self, request: Request, num_new_tokens: int) -> bool:
        """Whether allocate(request, num_new_tokens) would succeed; asking changes nothing.

        Exactly: True if and only if allocate would not raise OutOfBlocksError
        (the scheduler admits on this answer, then allocates).
        """
        table = self.tables.get(request.request_id, [])
        start = request.num_computed_tokens
        end = start + num_new_tokens
        # Idea: exactly when allocate would succeed: what does allocate take from the pool?
        # Stuck? `miniyaie hint 2.3` prints hints, one level at a time.
        # TODO(Task 2.3): PagedMemory: sharing, copy-on-write and the queue of copies. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 3: PagedMemory: sharing, copy-on-write and the queue of copies — see book/src/ch02_paged_kv_cache.md')
    # ANCHOR_END: can_allocate

    # ANCHOR: allocate
    def allocate(self, request: Request, num_new_tokens: int) -> None:
        """Grow the table of `request` to hold num_computed_tokens + num_new_tokens tokens.

        Positions num_computed_tokens.. will be written: any shared block
        among them is replaced by a private copy first (queued for
        `take_block_copies`). Applied before the step, the queue gives each
        private copy the K/V the shared block holds in that step, whatever
        is forked, allocated or freed between this call and the step.
        Raises OutOfBlocksError with a message naming the request, changing
        nothing, when the pool cannot hold it.
        """
        start = request.num_computed_tokens
        end = start + num_new_tokens
        # Idea: which blocks must change before this step's tokens are written, and what must the runner be told?
        # Stuck? `miniyaie hint 2.3` prints hints, one level at a time.
        # TODO(Task 2.3): PagedMemory: sharing, copy-on-write and the queue of copies. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 3: PagedMemory: sharing, copy-on-write and the queue of copies — see book/src/ch02_paged_kv_cache.md')
    # ANCHOR_END: allocate

    # ANCHOR: free
    def free(self, request: Request) -> None:
        """Drop the request's share of every block it holds (finished, aborted or preempted).

        Its table is forgotten; a block goes back to the pool when its last
        owner lets go. Freeing a request that holds nothing does nothing.

        The queue of copies must stay safe to run: a request can be freed
        between the allocate that queued a copy and the step that applies it
        (take_block_copies, then copy_blocks). Whatever is freed, and whatever
        is allocated afterwards, the queue taken before the step (1) holds no
        copy into a block that has no owner, nor into a block handed out
        again after it was freed (its next owner's K/V are its own), and (2)
        once applied, lets every request that still holds its blocks read
        back the K/V of every position it has computed.
        """
        # Idea: which blocks does the request hold, and what must it give back of each?
        # Stuck? `miniyaie hint 2.3` prints hints, one level at a time.
        # TODO(Task 2.3): PagedMemory: sharing, copy-on-write and the queue of copies. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 3: PagedMemory: sharing, copy-on-write and the queue of copies — see book/src/ch02_paged_kv_cache.md')

    def _after_release(self) -> None:
        """Make the queue of copies meet free's contract (1) and (2) after blocks were given back.

        free and truncate call it once they have dropped their references.
        """
        # Idea: a queued copy outlives the allocate that queued it: which copies may still run?
        # Stuck? `miniyaie hint 2.3` prints hints, one level at a time.
        # TODO(Task 2.3): PagedMemory: sharing, copy-on-write and the queue of copies. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 3: PagedMemory: sharing, copy-on-write and the queue of copies — see book/src/ch02_paged_kv_cache.md')
    # ANCHOR_END: free

    # ------------------------------------------------------------ sharing
    # ANCHOR: sharing
    def share_blocks(self, request_id: str, blocks: Sequence[int]) -> None:
        """Start the table of `request_id` with `blocks`, already filled by another owner.

        The request takes one reference on each (allocator.share); it reads
        them freely and copies any of them on its first write into it. Its
        table is a new list: later changes to `blocks` do not reach it. A
        request that already holds blocks is a ValueError (one with an empty
        table, after allocate(request, 0) say, holds none), and so is a list
        holding a free block (nobody filled it); either way nothing changes:
        no block gains a reference. Used by `fork`, and by chapter 3 to start
        a request on a cached prefix.
        """
        # Idea: what does the pool look like if the third of five blocks cannot be shared?
        # Stuck? `miniyaie hint 2.3` prints hints, one level at a time.
        # TODO(Task 2.3): PagedMemory: sharing, copy-on-write and the queue of copies. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 3: PagedMemory: sharing, copy-on-write and the queue of copies — see book/src/ch02_paged_kv_cache.md')

    def fork(self, parent_request_id: str, child_request_id: str) -> None:
        """Give the child every block of the parent, shared (parallel sampling: n > 1).

        The child's request must have the parent's num_computed_tokens: the
        two continue from the same cached tokens and diverge from there. A
        parent that holds no blocks is a KeyError.
        """
        # Idea: what does the child start on?
        # Stuck? `miniyaie hint 2.3` prints hints, one level at a time.
        # TODO(Task 2.3): PagedMemory: sharing, copy-on-write and the queue of copies. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 3: PagedMemory: sharing, copy-on-write and the queue of copies — see book/src/ch02_paged_kv_cache.md')

    def take_block_copies(self) -> list[tuple[int, int]]:
        """The (src, dst) block copies queued by copy-on-write since the last call, in order; the queue is then empty.

        The runner applies them (copy_blocks) before the forward pass.
        """
        # Idea: hand the queue over and start a new one.
        # Stuck? `miniyaie hint 2.3` prints hints, one level at a time.
        # TODO(Task 2.3): PagedMemory: sharing, copy-on-write and the queue of copies. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 3: PagedMemory: sharing, copy-on-write and the queue of copies — see book/src/ch02_paged_kv_cache.md')
    # ANCHOR_END: sharing

    def truncate(self, request: Request, num_tokens: int) -> None:
        """Keep only the blocks that positions 0..num_tokens-1 need; give back the rest (one reference each).

        Speculative decoding (chapter 9) allocates slots for drafts and rewinds those the model rejected.
        num_tokens may not cut into the request's computed tokens (ValueError): their K/V are in use.
        """
        if num_tokens < request.num_computed_tokens:
            raise ValueError(f"request {request.request_id!r} has {request.num_computed_tokens} computed tokens; "
                             f"cannot keep only {num_tokens}")
        table = self.tables.get(request.request_id, [])
        keep = blocks_needed(num_tokens, self.block_size)
        for block in table[keep:]:
            self.allocator.free(block)
        del table[keep:]
        self._after_release()

    # ------------------------------------------------------------ for the model runner
    def block_table(self, request_id: str) -> list[int]:
        """The block ids of the request, in position order (a copy)."""
        return list(self.tables.get(request_id, []))

    def slot_mapping(self, request_id: str, start: int, end: int) -> list[int]:
        """The pool slots of the request's positions start..end-1."""
        return slot_mapping(self.tables.get(request_id, []), start, end, self.block_size)

    def attention_metadata(
        self, batch: Sequence[tuple[str, int, int]], device: str | torch.device = "cpu"
    ) -> AttentionMetadata:
        """The metadata of a step that computes positions start..end-1 of each (request_id, start, end)."""
        return attention_metadata([self.tables.get(rid, []) for rid, _, _ in batch], batch, self.block_size, device)
