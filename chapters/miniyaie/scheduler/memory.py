"""The scheduler's view of KV memory, and the simplest implementation of it.

The scheduler never sees blocks or tensors: it asks whether a request's
cache can grow by N tokens, grows it, and frees it. Chapter 2 implements the
same interface with a paged block pool, chapter 3 adds a prefix cache.
"""

from __future__ import annotations

from typing import Protocol

from miniyaie.scheduler.request import Request


# ANCHOR: kv_memory
class KVMemory(Protocol):
    @property
    def capacity_tokens(self) -> int:
        """Tokens the whole pool holds; a request longer than this can never run."""
        ...

    def cached_prefix_len(self, request: Request) -> int:
        """Leading tokens of `request` (prompt, and output for a resumed request) already in a prefix cache (0 without one). Changes nothing."""
        ...

    def can_allocate(self, request: Request, num_new_tokens: int) -> bool:
        """Whether the cache of `request` can grow to num_computed_tokens + num_new_tokens tokens."""
        ...

    def allocate(self, request: Request, num_new_tokens: int) -> None:
        """Grow the cache of `request` to hold num_computed_tokens + num_new_tokens tokens.

        Raises MemoryError, changing nothing, when it does not fit.
        """
        ...

    def free(self, request: Request) -> None:
        """Give back everything `request` holds (finished, aborted or preempted)."""
        ...
# ANCHOR_END: kv_memory


# ANCHOR: counting_memory
class TokenCountingMemory:
    """Memory as a plain count of token slots: no blocks, no sharing, no prefix cache.

    Each request holds a number of slots: the most tokens it was ever grown
    to (num_computed_tokens + num_new_tokens of an allocate) since it was
    last freed; the pool holds `capacity_tokens` slots in all.
    """

    def __init__(self, capacity_tokens: int):
        if capacity_tokens < 1:
            raise ValueError(f"capacity must be at least one token, got {capacity_tokens}")
        self._capacity = capacity_tokens
        self._held: dict[str, int] = {}  # request id -> tokens reserved

    @property
    def capacity_tokens(self) -> int:
        return self._capacity

    @property
    def num_used_tokens(self) -> int:
        """Slots held by all requests together."""
        return sum(self._held.values())

    def cached_prefix_len(self, request: Request) -> int:
        return 0

    def can_allocate(self, request: Request, num_new_tokens: int) -> bool:
        """Whether the request can grow to hold num_computed_tokens + num_new_tokens tokens.

        True exactly when allocate(request, num_new_tokens) would succeed; a
        request that already holds that many slots (or more) always fits.
        Asking changes nothing. Example: capacity 10, request a holds 6; b
        (num_computed_tokens 0) fits 4 new tokens but not 5; a, computed 6,
        fits 4 more but not 5.
        """
        # Idea: a request needs only the slots it does not hold yet.
        # Stuck? `miniyaie hint 1.1` prints hints, one level at a time.
        # TODO(Task 1.1): Counting memory. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 1: Counting memory — see book/src/ch01_scheduler.md')

    def allocate(self, request: Request, num_new_tokens: int) -> None:
        """Grow the request to hold num_computed_tokens + num_new_tokens tokens (never shrink it).

        Raises MemoryError, changing nothing, when can_allocate says no.
        """
        # Idea: what must the pool look like after a call that raises, and after an ask smaller than what is held?
        # Stuck? `miniyaie hint 1.1` prints hints, one level at a time.
        # TODO(Task 1.1): Counting memory. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 1: Counting memory — see book/src/ch01_scheduler.md')

    def _missing(self, request: Request, num_new_tokens: int) -> int:
        """Slots still to reserve so the request holds num_computed + num_new tokens."""
        # Idea: what does a request need that already holds more than it now asks for?
        # Stuck? `miniyaie hint 1.1` prints hints, one level at a time.
        # TODO(Task 1.1): Counting memory. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 1: Counting memory — see book/src/ch01_scheduler.md')

    def free(self, request: Request) -> None:
        """Give back every slot the request holds; freeing a request that holds none does nothing."""
        # Idea: forget the request's count; unknown ids are fine.
        # Stuck? `miniyaie hint 1.1` prints hints, one level at a time.
        # TODO(Task 1.1): Counting memory. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 1: Counting memory — see book/src/ch01_scheduler.md')
# ANCHOR_END: counting_memory
