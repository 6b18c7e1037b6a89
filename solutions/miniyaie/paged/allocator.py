"""The block allocator: a free list of fixed-size KV blocks with reference counts.

The pool is cut into `num_blocks` blocks of `block_size` token slots each
(see pool.py); the allocator deals only in block ids 0..num_blocks-1 and
never touches a tensor. A block is free (reference count 0, on the free
list) or in use by one or more owners: the block tables of requests, and in
chapter 3 the prefix cache. Sharing a block adds an owner; freeing drops one;
the block returns to the free list when its last owner lets go.
"""

from __future__ import annotations

from collections import deque


class OutOfBlocksError(MemoryError):
    """The pool has fewer free blocks than asked for. Nothing was allocated."""


# ANCHOR: allocator_state
class BlockAllocator:
    """Hands out block ids, counts their owners, and takes them back.

    State: `_ref_counts[b]` is the number of owners of block b (0 when free);
    `_free` holds exactly the blocks whose count is 0. Which free block comes
    next is the allocator's choice: callers never depend on block ids.
    """

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"a pool needs at least one block, got {num_blocks}")
        self._num_blocks = num_blocks
        self._ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_blocks(self) -> int:
        return self._num_blocks

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self._num_blocks - len(self._free)

    def ref_count(self, block: int) -> int:
        """Owners of `block`: 0 when it is free."""
        self._check(block)
        return self._ref_counts[block]
    # ANCHOR_END: allocator_state

    # ANCHOR: allocate
    def allocate(self) -> int:
        """Take a free block: it gets one owner (the caller) and leaves the free list.

        Raises OutOfBlocksError, changing nothing, when no block is free.
        """
        # Nudge: two views of one state (the counts, the free list): which must change together?
        # Hint 1: Two views of the same state must agree at all times: the free list holds exactly
        #   the blocks whose reference count is 0. Taking a block moves it from one side to the
        #   other: off the free list, count 1.
        # Hint 2: If the free list is empty, raise OutOfBlocksError with a message saying the pool
        #   is full. Otherwise take any block off the free list, set its count to 1, return it.
        # Hint 3:
        #   if not free: raise OutOfBlocksError("all N blocks are in use")
        #   block = free.popleft(); ref_counts[block] = 1; return block
        # BEGIN SOLUTION 2.1: The block allocator: reference counts and copy-on-write
        if not self._free:
            raise OutOfBlocksError(f"all {self._num_blocks} blocks are in use")
        block = self._free.popleft()
        self._ref_counts[block] = 1
        return block
        # END SOLUTION

    def allocate_many(self, n: int) -> list[int]:
        """Take `n` free blocks (distinct), or none.

        Raises OutOfBlocksError, with a message saying how many blocks were
        asked for and how many are free, and changing nothing, when fewer
        than `n` are free; ValueError for a negative `n`.
        """
        # Nudge: when can you know that all n fit, and what must not have happened yet if they do not?
        # Hint 1: A request that gets half of the blocks it needs is worse off than one that gets
        #   none: it holds memory and still cannot run. So decide up front, from the free count,
        #   whether all n can be taken; only then take them.
        # Hint 2: Reject a negative n with ValueError. If n is more than the free blocks, raise
        #   OutOfBlocksError naming n and the free count. Otherwise call allocate() n times and
        #   return the blocks.
        # Hint 3:
        #   if n < 0: raise ValueError
        #   if n > len(free): raise OutOfBlocksError(f"need {n} blocks but only {len(free)} ... are free")
        #   return [allocate() for _ in range(n)]
        # BEGIN SOLUTION 2.1: The block allocator: reference counts and copy-on-write
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > len(self._free):
            raise OutOfBlocksError(
                f"need {n} blocks but only {len(self._free)} of {self._num_blocks} are free"
            )
        return [self.allocate() for _ in range(n)]
        # END SOLUTION
    # ANCHOR_END: allocate

    # ANCHOR: free
    def free(self, block: int) -> None:
        """Drop one owner of `block`; with no owner left it goes back to the free list.

        Freeing a block that is already free (count 0) is a double free, a
        bug in the caller: ValueError, and nothing changes. A block id outside
        the pool is a ValueError too.
        """
        self._check(block)
        # Nudge: when exactly does a block become free again, and what must a free never do?
        # Hint 1: A block with several owners (shared) stays in use until the last of them lets go;
        #   only then is it free again. A count never goes below 0: freeing a free block is a
        #   caller's bug (a double free), refused at once rather than turned into a block that
        #   is later handed to two owners.
        # Hint 2: If the block's count is 0, raise ValueError (say "double free"). Otherwise
        #   decrement it, and when it reaches 0 put the block back on the free list.
        # Hint 3:
        #   if ref_counts[block] == 0: raise ValueError("block ... is already free (double free)")
        #   ref_counts[block] -= 1
        #   if ref_counts[block] == 0: free.append(block)
        # BEGIN SOLUTION 2.1: The block allocator: reference counts and copy-on-write
        if self._ref_counts[block] == 0:
            raise ValueError(f"block {block} is already free (double free)")
        self._ref_counts[block] -= 1
        if self._ref_counts[block] == 0:
            self._free.append(block)
        # END SOLUTION

    def share(self, block: int) -> None:
        """Add an owner to a block in use (a forked request, a prefix cache entry).

        Sharing a free block is a ValueError (nobody filled it: there is
        nothing to share), and nothing changes.
        """
        self._check(block)
        # Nudge: what may be shared, and what does sharing cost the pool?
        # Hint 1: Sharing adds an owner without copying anything: the block's count goes up by one
        #   and it stays off the free list. A free block holds nothing worth sharing, and sharing
        #   it would give it an owner while it sits on the free list.
        # Hint 2: If the count is 0, raise ValueError. Otherwise add one to it.
        # Hint 3:
        #   if ref_counts[block] == 0: raise ValueError("block ... is free")
        #   ref_counts[block] += 1
        # BEGIN SOLUTION 2.1: The block allocator: reference counts and copy-on-write
        if self._ref_counts[block] == 0:
            raise ValueError(f"block {block} is free: only a block in use can be shared")
        self._ref_counts[block] += 1
        # END SOLUTION
    # ANCHOR_END: free

    # ANCHOR: copy_on_write
    def copy_on_write(self, block: int) -> int:
        """The block the caller may write into instead of `block`.

        The caller owns `block` and is about to write into it. If nobody else
        owns it, that is `block` itself. Otherwise the caller gets a fresh
        block and gives up its share of the old one (which the other owners
        keep, unchanged); the caller must then copy the old block's K/V into
        the new one before writing. Raises OutOfBlocksError, changing nothing,
        when no block is free.
        """
        self._check(block)
        if self._ref_counts[block] == 0:
            raise ValueError(f"block {block} is free: nobody may write into it")
        # Nudge: who else would see the write, and what must still be true if the pool is full?
        # Hint 1: The invariant is that no owner ever sees another owner's writes. A block with one
        #   owner can be written in place; a shared one must not be touched, so the writer moves
        #   to a private block. Order matters: when the pool is full the call must fail before
        #   anything changed, so the new block is taken before the old reference is dropped.
        # Hint 2: If the block's count is 1, return it. Otherwise allocate a new block (this raises
        #   OutOfBlocksError when none is free, and nothing has changed yet), drop the caller's
        #   reference to the old block with free (the other owners keep it), return the new one.
        # Hint 3:
        #   if ref_counts[block] == 1: return block
        #   new = allocate()        # may raise: nothing changed
        #   free(block)             # the others keep it
        #   return new
        # BEGIN SOLUTION 2.1: The block allocator: reference counts and copy-on-write
        if self._ref_counts[block] == 1:
            return block
        new_block = self.allocate()
        self.free(block)  # the other owners keep it
        return new_block
        # END SOLUTION
    # ANCHOR_END: copy_on_write

    def _check(self, block: int) -> None:
        if not 0 <= block < self._num_blocks:
            raise ValueError(f"block {block} is not in this pool (0..{self._num_blocks - 1})")
