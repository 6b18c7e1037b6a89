"""The block allocator: fixed-size KV blocks, their owners, and the free ones.

The pool is cut into `num_blocks` blocks of `block_size` token slots each
(see pool.py); the allocator deals only in block ids 0..num_blocks-1 and
never touches a tensor. A block is free or in use by one or more owners: the
block tables of requests, and in chapter 3 the prefix cache. Sharing a block
adds an owner; freeing drops one; the block is free again when its last owner
lets go.
"""

from __future__ import annotations

from collections import deque


class OutOfBlocksError(MemoryError):
    """The pool has fewer free blocks than asked for. Nothing was allocated."""


# ANCHOR: allocator_state
class BlockAllocator:
    """Hands out block ids, counts their owners, and takes them back.

    Invariants, after every call (a refused one included): num_free +
    num_used == num_blocks; ref_count(b) is the number of owners of block b,
    never negative; a block is free exactly when its count is 0, and only a
    free block is ever handed out. Which free block comes next is the
    allocator's choice: callers never depend on block ids. Every call costs
    the same whatever the pool's size: none looks at every block, nor at
    every free block (asserted: thousands of calls on a pool of two million
    blocks, half a million of them free and scattered, within a CPU budget).
    """

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"a pool needs at least one block, got {num_blocks}")
        self._num_blocks = num_blocks
        # Nudge: what must allocate find at once, and what must free and share know about a block?
        # Hint 1: The design is the state: what answers each question without a scan. Two questions
        #   come up on every call: "how many owners has block b?" (free, share, copy_on_write,
        #   ref_count) and "give me any free block" (allocate). Keep one structure for each, and
        #   keep them in agreement: a block is in the second exactly when its count in the first is
        #   0. Then no call has to scan the pool, and num_free / num_used read a length. A list of
        #   counts alone works until the pool has millions of blocks: then finding a free block,
        #   or counting the used ones, walks it on every call.
        # Hint 2: A list of counts, one per block, all 0; and a queue (or list, or set) of the free
        #   blocks, holding every block at the start. The counters read the queue's length.
        # Hint 3:
        #   ref_counts = [0] * num_blocks
        #   free = deque(range(num_blocks))
        # BEGIN SOLUTION 2.1: The block allocator: owners, sharing and copy-on-write
        self._ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        # END SOLUTION

    @property
    def num_blocks(self) -> int:
        return self._num_blocks

    @property
    def num_free(self) -> int:
        """Blocks with no owner."""
        # Nudge: read it off your state.
        # Hint 1: The free blocks are the ones whose count is 0; your state keeps them in one place.
        # Hint 2: The number of blocks in the free structure.
        # Hint 3:
        #   return len(free)
        # BEGIN SOLUTION 2.1: The block allocator: owners, sharing and copy-on-write
        return len(self._free)
        # END SOLUTION

    @property
    def num_used(self) -> int:
        """Blocks with at least one owner (a shared block counts once)."""
        # Nudge: a block shared by three owners is still one block in use.
        # Hint 1: Every block is either free or in use.
        # Hint 2: All blocks minus the free ones.
        # Hint 3:
        #   return num_blocks - len(free)
        # BEGIN SOLUTION 2.1: The block allocator: owners, sharing and copy-on-write
        return self._num_blocks - len(self._free)
        # END SOLUTION

    def ref_count(self, block: int) -> int:
        """Owners of `block`: 0 when it is free. A block id outside the pool is a ValueError."""
        self._check(block)
        # Nudge: read it off your state.
        # Hint 1: Each block has one owner count.
        # Hint 2: Return the block's entry in the counts.
        # Hint 3:
        #   return ref_counts[block]
        # BEGIN SOLUTION 2.1: The block allocator: owners, sharing and copy-on-write
        return self._ref_counts[block]
        # END SOLUTION
    # ANCHOR_END: allocator_state

    # ANCHOR: allocate
    def allocate(self) -> int:
        """Take a free block: it gets one owner (the caller).

        Raises OutOfBlocksError, changing nothing, when no block is free.
        """
        # Nudge: whatever state you keep, every view of it must agree again when the call returns.
        # Hint 1: The free structure holds exactly the blocks whose count is 0. Taking a block
        #   moves it from one side to the other: out of the free blocks, count 1.
        # Hint 2: If no block is free, raise OutOfBlocksError with a message saying the pool is
        #   full. Otherwise take any free block, set its count to 1, return it.
        # Hint 3:
        #   if not free: raise OutOfBlocksError("all N blocks are in use")
        #   block = free.popleft(); ref_counts[block] = 1; return block
        # BEGIN SOLUTION 2.1: The block allocator: owners, sharing and copy-on-write
        if not self._free:
            raise OutOfBlocksError(f"all {self._num_blocks} blocks are in use")
        block = self._free.popleft()
        self._ref_counts[block] = 1
        return block
        # END SOLUTION

    def allocate_many(self, n: int) -> list[int]:
        """Take `n` distinct free blocks, one owner each, or none at all.

        Raises OutOfBlocksError, with a message saying how many blocks were
        asked for and how many are free, and changing nothing, when fewer
        than `n` are free; ValueError for a negative `n`.
        """
        # Nudge: when can you know that all n fit, and what must not have happened yet if they do not?
        # Hint 1: A request that gets half of the blocks it needs is worse off than one that gets
        #   none: it holds memory and still cannot run. Whether all n can be taken is known
        #   before any is taken.
        # Hint 2: Reject a negative n with ValueError. If n is more than the free blocks, raise
        #   OutOfBlocksError naming n and the free count. Otherwise call allocate() n times and
        #   return the blocks.
        # Hint 3:
        #   if n < 0: raise ValueError
        #   if n > len(free): raise OutOfBlocksError(f"need {n} blocks but only {len(free)} ... are free")
        #   return [allocate() for _ in range(n)]
        # BEGIN SOLUTION 2.1: The block allocator: owners, sharing and copy-on-write
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
        """Drop one owner of `block`; with no owner left the block is free again.

        Freeing a block that is already free is a double free, a bug in the
        caller: ValueError, and nothing changes. A block id outside the pool
        is a ValueError too.
        """
        self._check(block)
        # Nudge: when exactly does a block become free again, and what must a free never do?
        # Hint 1: A block with several owners (shared) stays in use until the last of them lets go;
        #   only then is it free again. A count never goes below 0: freeing a free block is a
        #   caller's bug (a double free), refused at once rather than turned into a block that
        #   is later handed to two owners.
        # Hint 2: If the block's count is 0, raise ValueError (say "double free"). Otherwise
        #   decrement it, and when it reaches 0 put the block back with the free ones.
        # Hint 3:
        #   if ref_counts[block] == 0: raise ValueError("block ... is already free (double free)")
        #   ref_counts[block] -= 1
        #   if ref_counts[block] == 0: free.append(block)
        # BEGIN SOLUTION 2.1: The block allocator: owners, sharing and copy-on-write
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
        # Hint 1: Sharing adds an owner without copying anything: the block stays in use, with one
        #   owner more. A free block holds nothing worth sharing, and sharing it would give an
        #   owner to a block that may be handed out next.
        # Hint 2: If the count is 0, raise ValueError. Otherwise add one to it.
        # Hint 3:
        #   if ref_counts[block] == 0: raise ValueError("block ... is free")
        #   ref_counts[block] += 1
        # BEGIN SOLUTION 2.1: The block allocator: owners, sharing and copy-on-write
        if self._ref_counts[block] == 0:
            raise ValueError(f"block {block} is free: only a block in use can be shared")
        self._ref_counts[block] += 1
        # END SOLUTION
    # ANCHOR_END: free

    # ANCHOR: copy_on_write
    def copy_on_write(self, block: int) -> int:
        """The block the caller may write into instead of `block`.

        The caller owns `block` and is about to write into it. If nobody else
        owns it, that is `block` itself. Otherwise the caller ends up owning a
        fresh block (which it must fill with a copy of the old block's K/V
        before writing) and no longer owns `block`, which the other owners
        keep, unchanged. Raises OutOfBlocksError, changing nothing, when a
        fresh block is needed and none is free; ValueError for a free `block`.
        """
        self._check(block)
        # Nudge: who else would see the write, and what must still be true if the pool is full?
        # Hint 1: The invariant is that no owner ever sees another owner's writes. A block with one
        #   owner can be written in place; a shared one must not be touched, so the writer moves
        #   to a private block. When the pool is full the call must fail before anything has
        #   changed: of the two changes (take a fresh block, drop the caller's reference to the
        #   old one) only the first can fail, so it comes first; check the arguments before either.
        # Hint 2: A free block (count 0) is a ValueError. If the block's count is 1, return it.
        #   Otherwise allocate a new block first (this raises OutOfBlocksError when none is free,
        #   and nothing has changed yet), then drop the caller's reference to the old block with
        #   free (the other owners keep it), and return the new one.
        # Hint 3:
        #   if ref_counts[block] == 0: raise ValueError("block ... is free")
        #   if ref_counts[block] == 1: return block
        #   new = allocate()        # may raise: nothing changed
        #   free(block)             # the others keep it
        #   return new
        # BEGIN SOLUTION 2.1: The block allocator: owners, sharing and copy-on-write
        if self._ref_counts[block] == 0:
            raise ValueError(f"block {block} is free: nobody may write into it")
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
