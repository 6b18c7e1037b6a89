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
    """Memory as a plain count of token slots: no blocks, no sharing, no prefix cache."""

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
        return sum(self._held.values())

    def cached_prefix_len(self, request: Request) -> int:
        return 0

    def _missing(self, request: Request, num_new_tokens: int) -> int:
        """Slots still to reserve so the request holds num_computed + num_new tokens."""
        target = request.num_computed_tokens + num_new_tokens
        return max(0, target - self._held.get(request.request_id, 0))

    def can_allocate(self, request: Request, num_new_tokens: int) -> bool:
        # Hint: the request fits if the slots it is missing are no more than the free slots.
        # TODO(Task 1.1): Counting memory. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 1: Counting memory — see book/src/ch01_scheduler.md')

    def allocate(self, request: Request, num_new_tokens: int) -> None:
        if not self.can_allocate(request, num_new_tokens):
            raise MemoryError(f"request {request.request_id!r} does not fit: {num_new_tokens} more tokens")
        self._held[request.request_id] = self._held.get(request.request_id, 0) + self._missing(request, num_new_tokens)

    def free(self, request: Request) -> None:
        self._held.pop(request.request_id, None)
# ANCHOR_END: counting_memory
