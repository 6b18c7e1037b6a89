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
        # Nudge: a request needs only the slots it does not hold yet.
        # Hint 1: Memory is a count per request id. The request must end up holding
        #   num_computed_tokens + num_new_tokens slots; what it holds already is not asked
        #   for again. The invariant: the slots held by all requests never exceed the capacity.
        # Hint 2: The target is num_computed_tokens + num_new_tokens. The missing slots are the
        #   target minus what the request holds (self._held, 0 for a new id), never below 0.
        #   It fits when the missing slots are at most the free slots, capacity minus used.
        # Hint 3:
        #   missing = max(0, num_computed_tokens + num_new_tokens - held.get(request_id, 0))
        #   return missing <= capacity - num_used_tokens
        # BEGIN SOLUTION 1.1: Counting memory
        return self._missing(request, num_new_tokens) <= self._capacity - self.num_used_tokens
        # END SOLUTION

    def allocate(self, request: Request, num_new_tokens: int) -> None:
        """Grow the request to hold num_computed_tokens + num_new_tokens tokens (never shrink it).

        Raises MemoryError, changing nothing, when can_allocate says no.
        """
        # Nudge: what must the pool look like after a call that raises, and after an ask smaller than what is held?
        # Hint 1: All or nothing: when the request does not fit, raise MemoryError before touching
        #   anything. When it fits, its holding grows to the target; it never shrinks (a smaller
        #   ask leaves it as it is).
        # Hint 2: If can_allocate is false, raise MemoryError with a message naming the request.
        #   Otherwise add the missing slots (target minus held, at least 0) to what the request
        #   holds in self._held.
        # Hint 3:
        #   if not can_allocate(request, num_new_tokens): raise MemoryError(...)
        #   held[request_id] = held.get(request_id, 0) + missing
        # BEGIN SOLUTION 1.1: Counting memory
        if not self.can_allocate(request, num_new_tokens):
            raise MemoryError(f"request {request.request_id!r} does not fit: {num_new_tokens} more tokens")
        self._held[request.request_id] = self._held.get(request.request_id, 0) + self._missing(request, num_new_tokens)
        # END SOLUTION

    def _missing(self, request: Request, num_new_tokens: int) -> int:
        """Slots still to reserve so the request holds num_computed + num_new tokens."""
        # Nudge: what does a request need that already holds more than it now asks for?
        # Hint 1: A request that holds more than it asks for needs nothing more: 0, not a
        #   negative number (a negative count would hand slots back by accident).
        # Hint 2: Subtract the slots the request holds (0 if it holds none) from
        #   num_computed_tokens + num_new_tokens and clamp the result at 0.
        # Hint 3:
        #   return max(0, request.num_computed_tokens + num_new_tokens - held.get(request_id, 0))
        # BEGIN SOLUTION 1.1: Counting memory
        target = request.num_computed_tokens + num_new_tokens
        return max(0, target - self._held.get(request.request_id, 0))
        # END SOLUTION

    def free(self, request: Request) -> None:
        """Give back every slot the request holds; freeing a request that holds none does nothing."""
        # Nudge: forget the request's count; unknown ids are fine.
        # Hint 1: After free, the request holds nothing and its slots are free for others.
        #   The scheduler frees finished, aborted and preempted requests, sometimes ones that
        #   never got memory: that must not raise.
        # Hint 2: Remove the request's id from self._held if it is there.
        # Hint 3:
        #   held.pop(request_id, None)
        # BEGIN SOLUTION 1.1: Counting memory
        self._held.pop(request.request_id, None)
        # END SOLUTION
# ANCHOR_END: counting_memory
