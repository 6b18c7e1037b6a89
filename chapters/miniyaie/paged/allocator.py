"""The block allocator: fixed-size KV blocks, their owners, and the free ones.

The pool is cut into `num_blocks` blocks of `block_size` token slots each
(see pool.py); the allocator deals only in block ids 0..num_blocks-1 and
never touches a tensor. A block is free or in use by one or more owners: the
block tables of requests, and in chapter 3 the prefix cache. Sharing a block
adds an owner; freeing drops one; the block is free again when its last owner
lets go.
"""

from __future__ import annotations


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
        # Idea: what must allocate find at once, and what must free and share know about a block?
        # Stuck? `miniyaie hint 2.1` prints hints, one level at a time.
        # TODO(Task 2.1): The block allocator: owners, sharing and copy-on-write. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 1: The block allocator: owners, sharing and copy-on-write — see book/src/ch02_paged_kv_cache.md')

    @property
    def num_blocks(self) -> int:
        return self._num_blocks

    @property
    def num_free(self) -> int:
        """Blocks with no owner."""
        # Idea: read it off your state.
        # Stuck? `miniyaie hint 2.1` prints hints, one level at a time.
        # TODO(Task 2.1): The block allocator: owners, sharing and copy-on-write. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 1: The block allocator: owners, sharing and copy-on-write — see book/src/ch02_paged_kv_cache.md')

    @property
    def num_used(self) -> int:
        """Blocks with at least one owner (a shared block counts once)."""
        # Idea: a block shared by three owners is still one block in use.
        # Stuck? `miniyaie hint 2.1` prints hints, one level at a time.
        # TODO(Task 2.1): The block allocator: owners, sharing and copy-on-write. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 1: The block allocator: owners, sharing and copy-on-write — see book/src/ch02_paged_kv_cache.md')

    def ref_count(self, block: int) -> int:
        """Owners of `block`: 0 when it is free. A block id outside the pool is a ValueError."""
        self._check(block)
        # Idea: read it off your state.
        # Stuck? `miniyaie hint 2.1` prints hints, one level at a time.
        # TODO(Task 2.1): The block allocator: owners, sharing and copy-on-write. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 1: The block allocator: owners, sharing and copy-on-write — see book/src/ch02_paged_kv_cache.md')
    # ANCHOR_END: allocator_state

    # ANCHOR: allocate
    def allocate(self) -> int:
        """Take a free block: it gets one owner (the caller).

        Raises OutOfBlocksError, changing nothing, when no block is free.
        """
        # Idea: whatever state you keep, every view of it must agree again when the call returns.
        # Stuck? `miniyaie hint 2.1` prints hints, one level at a time.
        # TODO(Task 2.1): The block allocator: owners, sharing and copy-on-write. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 1: The block allocator: owners, sharing and copy-on-write — see book/src/ch02_paged_kv_cache.md')

    def allocate_many(self, n: int) -> list[int]:
        """Take `n` distinct free blocks, one owner each, or none at all.

        Raises OutOfBlocksError, with a message saying how many blocks were
        asked for and how many are free, and changing nothing, when fewer
        than `n` are free; ValueError for a negative `n`.
        """
        # Idea: when can you know that all n fit, and what must not have happened yet if they do not?
        # Stuck? `miniyaie hint 2.1` prints hints, one level at a time.
        # TODO(Task 2.1): The block allocator: owners, sharing and copy-on-write. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 1: The block allocator: owners, sharing and copy-on-write — see book/src/ch02_paged_kv_cache.md')
    # ANCHOR_END: allocate

    # ANCHOR: free
    def free(self, block: int) -> None:
        """Drop one owner of `block`; with no owner left the block is free again.

        Freeing a block that is already free is a double free, a bug in the
        caller: ValueError, and nothing changes. A block id outside the pool
        is a ValueError too.
        """
        self._check(block)
        # Idea: when exactly does a block become free again, and what must a free never do?
        # Stuck? `miniyaie hint 2.1` prints hints, one level at a time.
        # TODO(Task 2.1): The block allocator: owners, sharing and copy-on-write. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 1: The block allocator: owners, sharing and copy-on-write — see book/src/ch02_paged_kv_cache.md')

    def share(self, block: int) -> None:
        """Add an owner to a block in use (a forked request, a prefix cache entry).

        Sharing a free block is a ValueError (nobody filled it: there is
        nothing to share), and nothing changes.
        """
        self._check(block)
        # Idea: what may be shared, and what does sharing cost the pool?
        # Stuck? `miniyaie hint 2.1` prints hints, one level at a time.
        # TODO(Task 2.1): The block allocator: owners, sharing and copy-on-write. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 1: The block allocator: owners, sharing and copy-on-write — see book/src/ch02_paged_kv_cache.md')
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
        # Idea: who else would see the write, and what must still be true if the pool is full?
        # Stuck? `miniyaie hint 2.1` prints hints, one level at a time.
        # TODO(Task 2.1): The block allocator: owners, sharing and copy-on-write. Replace this line with your code.
        raise NotImplementedError('Chapter 2, Task 1: The block allocator: owners, sharing and copy-on-write — see book/src/ch02_paged_kv_cache.md')
    # ANCHOR_END: copy_on_write

    def _check(self, block: int) -> None:
        if not 0 <= block < self._num_blocks:
            raise ValueError(f"block {block} is not in this pool (0..{self._num_blocks - 1})")
