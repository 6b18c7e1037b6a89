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
        # Nudge: which blocks does a write touch that could already be someone else's?
        # Hint 1: Writing positions start .. end - 1 touches the blocks from start // block_size up
        #   to the block of position end - 1. Of those, only the ones already in the table can be
        #   shared; the rest will be fresh blocks.
        # Hint 2: Nothing is written when end <= start: an empty range. Otherwise the range starts
        #   at start // block_size and stops at blocks_needed(end) or at the table's length,
        #   whichever is smaller.
        # Hint 3:
        #   if end <= start: return range(0)
        #   return range(start // block_size, min(len(table), blocks_needed(end, block_size)))
        # BEGIN SOLUTION 2.3: PagedMemory: sharing, copy-on-write and the queue of copies
        if end <= start:
            return range(0)
        return range(start // self.block_size, min(len(table), blocks_needed(end, self.block_size)))
        # END SOLUTION

    def _shared_blocks_to_write(self, table: list[int], start: int, end: int) -> list[int]:
        """Of the blocks _blocks_written names, the ones another owner also holds: one entry each, ascending.

        Callers outside this class (chapter 3) only count them: whether an
        entry is an index into `table` or a block id is up to allocate.
        """
        # Nudge: of the blocks this write changes, which could another owner see change?
        # Hint 1: This is the copy-on-write decision: a block is shared when its reference count is
        #   above 1 (this request plus at least one other owner). Only blocks the write touches
        #   matter; a shared block the request only reads stays shared.
        # Hint 2: Keep the indexes of _blocks_written(table, start, end) whose block has a reference
        #   count above 1.
        # Hint 3:
        #   return [i for i in _blocks_written(table, start, end) if allocator.ref_count(table[i]) > 1]
        # BEGIN SOLUTION 2.3: PagedMemory: sharing, copy-on-write and the queue of copies
        return [i for i in self._blocks_written(table, start, end) if self.allocator.ref_count(table[i]) > 1]
        # END SOLUTION

    def can_allocate(self, request: Request, num_new_tokens: int) -> bool:
        """Whether allocate(request, num_new_tokens) would succeed; asking changes nothing.

        Exactly: True if and only if allocate would not raise OutOfBlocksError
        (the scheduler admits on this answer, then allocates).
        """
        table = self.tables.get(request.request_id, [])
        start = request.num_computed_tokens
        end = start + num_new_tokens
        # Nudge: exactly when allocate would succeed: what does allocate take from the pool?
        # Hint 1: can_allocate must say yes exactly when allocate would succeed, or the scheduler
        #   admits a request that then fails. allocate takes two kinds of blocks: the ones the
        #   table lacks, and one private copy per shared block the new tokens land in.
        # Hint 2: Missing blocks: blocks_needed(end) minus the table's length, at least 0. Copies:
        #   the length of _shared_blocks_to_write(table, start, end). It fits when their sum is
        #   at most the allocator's free blocks.
        # Hint 3:
        #   missing = max(0, blocks_needed(end, block_size) - len(table))
        #   copies = len(_shared_blocks_to_write(table, start, end))
        #   return missing + copies <= allocator.num_free
        # BEGIN SOLUTION 2.3: PagedMemory: sharing, copy-on-write and the queue of copies
        missing = max(0, blocks_needed(end, self.block_size) - len(table))
        copies = len(self._shared_blocks_to_write(table, start, end))
        return missing + copies <= self.allocator.num_free
        # END SOLUTION
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
        # Nudge: which blocks must change before this step's tokens are written, and what must the runner be told?
        # Hint 1: A shared block is read-only: before the step writes into it, the request gets a
        #   private copy (copy_on_write) in its table, and the pool must be told to copy the K/V,
        #   which the model runner does from the queued (old, new) pairs before the forward
        #   pass. Then the table grows to hold every position up to end. Nothing may fail
        #   half-way: ask can_allocate before taking anything. The hard case is a fork before
        #   the step: A writes into a block it shares (copy (s, a) queued), B forks A and writes
        #   too, so B copies a, a block still waiting for its K/V. a holds nothing yet: copy
        #   from where its K/V will come from, (s, b), not (a, b). Chaining (a, b) after (s, a)
        #   breaks when A is freed before the step: a has no owner, so (s, a) must leave the
        #   queue (free's rule (1)), and (a, b) would then copy nothing.
        # Hint 2: If can_allocate says no, raise OutOfBlocksError naming the request. Take the
        #   request's table (a new empty one if it has none). For each index i in
        #   _shared_blocks_to_write(table, start, end): new = allocator.copy_on_write(table[i]);
        #   the source is table[i], or the source of the queued copy whose destination is
        #   table[i] if there is one; queue (source, new) in self._copies; put new in table[i].
        #   Then grow_block_table(table, end, block_size, allocator).
        # Hint 3:
        #   if not can_allocate(request, n): raise OutOfBlocksError(f"request {id!r} cannot grow ...")
        #   table = tables.setdefault(request_id, [])
        #   pending = {dst: src for src, dst in copies}
        #   for i in _shared_blocks_to_write(table, start, end):
        #       new = allocator.copy_on_write(table[i])
        #       copies.append((pending.get(table[i], table[i]), new)); table[i] = new
        #   grow_block_table(table, end, block_size, allocator)
        # BEGIN SOLUTION 2.3: PagedMemory: sharing, copy-on-write and the queue of copies
        if not self.can_allocate(request, num_new_tokens):
            raise OutOfBlocksError(
                f"request {request.request_id!r} cannot grow by {num_new_tokens} tokens: "
                f"{self.allocator.num_free} of {self.allocator.num_blocks} blocks of {self.block_size} tokens are free"
            )
        table = self.tables.setdefault(request.request_id, [])
        pending = {dst: src for src, dst in self._copies}  # blocks still waiting for their K/V
        for i in self._shared_blocks_to_write(table, start, end):
            new_block = self.allocator.copy_on_write(table[i])
            self._copies.append((pending.get(table[i], table[i]), new_block))
            table[i] = new_block
        grow_block_table(table, end, self.block_size, self.allocator)
        # END SOLUTION
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
        # Nudge: which blocks does the request hold, and what must it give back of each?
        # Hint 1: Each table entry is one reference on one block (a shared block appears in
        #   several tables). Freeing drops every one of the request's references; the
        #   allocator puts a block back when its last reference goes. Then the queue of
        #   copies may hold copies that are no longer safe: _after_release settles it.
        # Hint 2: Pop the request's table (an empty one if it has none), free each of its blocks
        #   once, then call _after_release.
        # Hint 3:
        #   for block in tables.pop(request_id, []): allocator.free(block)
        #   _after_release()
        # BEGIN SOLUTION 2.3: PagedMemory: sharing, copy-on-write and the queue of copies
        for block in self.tables.pop(request.request_id, []):
            self.allocator.free(block)
        self._after_release()
        # END SOLUTION

    def _after_release(self) -> None:
        """Make the queue of copies meet free's contract (1) and (2) after blocks were given back.

        free and truncate call it once they have dropped their references.
        """
        # Nudge: a queued copy outlives the allocate that queued it: which copies may still run?
        # Hint 1: A subtle case: a request may have queued a copy-on-write copy in this step and
        #   be freed (preempted) before the step runs. The copy's destination is then free, maybe
        #   handed out already: the runner must not write the old K/V over its next owner's. The
        #   two simple rules both break the pool. "Keep every copy" writes into blocks nobody
        #   owns (rule (1)). "Drop the freed request's copies" loses a copy somebody still needs:
        #   after a fork its destination may have another owner, and freeing the source's owner
        #   leaves the source intact until the step runs (rule (2)). Decide by the destination's
        #   owners, not by who queued the copy.
        # Hint 2: Keep only the queued (src, dst) copies whose dst still has an owner
        #   (ref_count > 0), in their order.
        # Hint 3:
        #   copies = [(src, dst) for src, dst in copies if allocator.ref_count(dst) > 0]
        # BEGIN SOLUTION 2.3: PagedMemory: sharing, copy-on-write and the queue of copies
        # a queued copy into a block nobody owns any more must not land on its next owner
        self._copies = [(src, dst) for src, dst in self._copies if self.allocator.ref_count(dst) > 0]
        # END SOLUTION
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
        # Nudge: what does the pool look like if the third of five blocks cannot be shared?
        # Hint 1: No block is allocated and no K/V moves: the request becomes one more owner of
        #   each block, and copy-on-write protects everyone when someone writes later. Refuse to
        #   replace a table the request already has (its blocks would leak). All or nothing:
        #   allocator.share refuses a free block, and if it does so at the third block the first
        #   two have already gained a reference that nobody will ever drop.
        # Hint 2: If the request already has a non-empty table, raise ValueError. Check every block
        #   before sharing any (a free one, ref_count 0, is a ValueError), or undo the shares
        #   already taken when one fails. Then share every block and store a copy of the list.
        # Hint 3:
        #   if tables.get(request_id): raise ValueError("already holds blocks")
        #   if any(allocator.ref_count(b) == 0 for b in blocks): raise ValueError("block ... is free")
        #   for b in blocks: allocator.share(b)
        #   tables[request_id] = list(blocks)
        # BEGIN SOLUTION 2.3: PagedMemory: sharing, copy-on-write and the queue of copies
        if self.tables.get(request_id):
            raise ValueError(f"request {request_id!r} already holds blocks")
        free = [block for block in blocks if self.allocator.ref_count(block) == 0]
        if free:
            raise ValueError(f"blocks {free} are free: only blocks in use can be shared")
        for block in blocks:
            self.allocator.share(block)
        self.tables[request_id] = list(blocks)
        # END SOLUTION

    def fork(self, parent_request_id: str, child_request_id: str) -> None:
        """Give the child every block of the parent, shared (parallel sampling: n > 1).

        The child's request must have the parent's num_computed_tokens: the
        two continue from the same cached tokens and diverge from there. A
        parent that holds no blocks is a KeyError.
        """
        # Nudge: what does the child start on?
        # Hint 1: The child starts where the parent is, on the same blocks: no copy now, one
        #   reference more on each block; the first write into the shared last block copies it.
        # Hint 2: Raise KeyError if the parent has no table; otherwise share the parent's blocks
        #   into the child's table.
        # Hint 3:
        #   if parent not in tables: raise KeyError
        #   share_blocks(child, tables[parent])
        # BEGIN SOLUTION 2.3: PagedMemory: sharing, copy-on-write and the queue of copies
        if parent_request_id not in self.tables:
            raise KeyError(f"request {parent_request_id!r} holds no blocks")
        self.share_blocks(child_request_id, self.tables[parent_request_id])
        # END SOLUTION

    def take_block_copies(self) -> list[tuple[int, int]]:
        """The (src, dst) block copies queued by copy-on-write since the last call, in order; the queue is then empty.

        The runner applies them (copy_blocks) before the forward pass.
        """
        # Nudge: hand the queue over and start a new one.
        # Hint 1: Every queued copy must be applied exactly once: returned by one call, never again.
        # Hint 2: Return the queued list and leave an empty one in its place.
        # Hint 3:
        #   copies, self._copies = self._copies, []; return copies
        # BEGIN SOLUTION 2.3: PagedMemory: sharing, copy-on-write and the queue of copies
        copies, self._copies = self._copies, []
        return copies
        # END SOLUTION
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
