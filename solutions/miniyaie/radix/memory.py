"""RadixMemory: the paged memory of chapter 2 with a radix-tree prefix cache.

To the scheduler it is the same `KVMemory`, with one difference:
`cached_prefix_len` now finds the longest cached prefix of a request. On
admission the request starts on those cached blocks (shared, not copied) and
computes only the rest. The full blocks a request computes join the tree as
soon as the step that computed them is over, so requests running at the same
time share a prefix too; when the pool runs short, unlocked cached blocks are
evicted, least recently used first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from miniyaie.paged import OutOfBlocksError, PagedMemory, blocks_needed
from miniyaie.radix.tree import Node, RadixCache

if TYPE_CHECKING:
    from miniyaie.scheduler import Request


class RadixMemory(PagedMemory):
    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        self.cache = RadixCache(self.allocator, block_size)
        self._locked: dict[str, Node] = {}  # request id -> the node its lock is on
        self._num_cached: dict[str, int] = {}  # request id -> its leading blocks already in the tree
        # Tokens served from the cache at admission, over all admissions: each admitted request adds
        # the num_computed_tokens it starts with (a resumed request's own output included). A full
        # hit starts at num_tokens - 1 (the last token is recomputed), so that token is not counted.
        self.hit_tokens = 0
        # Request id -> its LoRA adapter (chapter 11 fills it): the same tokens under two adapters are different K/V.
        self.adapters: dict[str, str] = {}

    # ANCHOR: cached_prefix_len
    def cached_prefix_len(self, request: Request) -> int:
        """The longest cached prefix of the request's tokens (a peek: LRU order unchanged)."""
        return self.cache.match_prefix(self.tokens_of(request), touch=False).length
    # ANCHOR_END: cached_prefix_len

    def tokens_of(self, request: Request) -> list:
        """The request's tokens as the tree keys them: under an adapter, the first one carries the adapter's name,
        so a path, and every block on it, belongs to one adapter (or to none)."""
        tokens, adapter = request.all_token_ids, self.adapters.get(request.request_id)
        return tokens if adapter is None else [(adapter, tokens[0]), *tokens[1:]]

    def _admission_blocks(self, request: Request) -> tuple[list[int], Node | None]:
        """For a request being admitted: the cached blocks of its first num_computed_tokens tokens."""
        if request.request_id in self.tables or request.num_computed_tokens == 0:
            return [], None
        match = self.cache.match_prefix(self.tokens_of(request), touch=False)
        needed = blocks_needed(request.num_computed_tokens, self.block_size)
        if needed > len(match.blocks):
            raise ValueError(f"request {request.request_id!r} starts at {request.num_computed_tokens} tokens; only {match.length} are cached")
        return match.blocks[:needed], match.node

    def _blocks_short(self, request: Request, num_new_tokens: int, prefix: list[int]) -> int:
        """Blocks the pool must free up for the request to grow (0 when they are free already)."""
        table = self.tables.get(request.request_id, prefix)
        start = request.num_computed_tokens
        end = start + num_new_tokens
        new_blocks = max(0, blocks_needed(end, self.block_size) - len(table))
        if request.request_id in self.tables:
            copies = len(self._shared_blocks_to_write(table, start, end))
        else:  # being admitted: every cached block it writes into is shared with the tree, so it is copied
            copies = len(self._blocks_written(table, start, end))
        return max(0, new_blocks + copies - self.allocator.num_free)

    def can_allocate(self, request: Request, num_new_tokens: int) -> bool:
        prefix, node = self._admission_blocks(request)
        if node is not None:
            self.cache.lock(node)  # the prefix we are about to use is not evictable
        try:
            return self._blocks_short(request, num_new_tokens, prefix) <= self.cache.evictable_blocks
        finally:
            if node is not None:
                self.cache.unlock(node)

    # ANCHOR: allocate
    def allocate(self, request: Request, num_new_tokens: int) -> None:
        """Chapter 2's allocate, on top of the prefix cache.

        Afterwards, as in chapter 2, the request's table holds
        num_computed_tokens + num_new_tokens tokens and a write into a shared
        block goes to a private copy. A request admitted with
        num_computed_tokens > 0 (the scheduler found that many tokens cached)
        has the cached blocks holding them at the start of its table, shared
        with the tree, not copied; no eviction may take any of them while it
        runs (every one stays locked from admission until the request is
        freed); hit_tokens has grown by num_computed_tokens. A running request's whole computed blocks are in
        the tree. Unlocked cached blocks may have been evicted, least recently
        used first, only as many as the free blocks were short of: an
        allocation that fits in the free blocks evicts nothing. Raises OutOfBlocksError, changing nothing,
        when can_allocate says no.
        """
        if not self.can_allocate(request, num_new_tokens):
            raise OutOfBlocksError(f"request {request.request_id!r} cannot grow by {num_new_tokens} tokens")
        # Nudge: each given piece changes the tree or the pool: whose results does each one change?
        # Hint 1: The order is the design. A prefix the request starts on must be locked before
        #   anything is evicted, or the eviction that makes room for it could take it away. The
        #   request shares the cached blocks (one more reference each): its K/V are not computed
        #   again, and copy-on-write keeps the tree's copy intact if the request writes into one.
        #   hit_tokens counts what the request does not compute: num_computed_tokens. Caching what a
        #   running request computed can give blocks back to the pool (where the tree already held
        #   those tokens, the request's duplicates are freed), so what the pool is short of is
        #   known only after that. A full hit starts inside the prefix's last block: with [1 .. 16]
        #   cached in blocks of 4, the request is admitted at 15 computed, so its fourth block is
        #   computed only in part. Caching "what it computed" then would move its lock onto the
        #   node of the first 12 tokens and leave that block evictable; kept on the match's node,
        #   the lock keeps all 16 cached through a cache.evict(10**6) right after allocate.
        # Hint 2: self._admission_blocks(request) gives the cached blocks and their node for a request
        #   being admitted on a hit (none otherwise). With a node: lock it, remember it in
        #   self._locked[request_id], share the blocks into the request's table
        #   (self.share_blocks) and add num_computed_tokens to hit_tokens; nothing to cache yet.
        #   Without: cache what the request computed so far (self._cache_computed). Then evict what the pool is short of,
        #   self._blocks_short(request, n, []), and call chapter 2's allocate (super().allocate).
        # Hint 3:
        #   prefix, node = _admission_blocks(request)
        #   if node is not None:
        #       cache.lock(node); _locked[request_id] = node
        #       share_blocks(request_id, prefix); hit_tokens += request.num_computed_tokens
        #   else:
        #       _cache_computed(request)
        #   cache.evict(_blocks_short(request, num_new_tokens, []))
        #   super().allocate(request, num_new_tokens)
        # BEGIN SOLUTION 3.4: Start on the cached prefix, cache what is computed
        prefix, node = self._admission_blocks(request)
        if node is not None:
            self.cache.lock(node)
            self._locked[request.request_id] = node
            self.share_blocks(request.request_id, prefix)
            self.hit_tokens += request.num_computed_tokens
        else:
            self._cache_computed(request)
        self.cache.evict(self._blocks_short(request, num_new_tokens, []))
        super().allocate(request, num_new_tokens)
        # END SOLUTION
    # ANCHOR_END: allocate

    # ANCHOR: cache_computed
    def _cache_computed(self, request: Request, finishing: bool = False) -> None:
        """Put the request's computed whole blocks into the tree and move its lock to their end.

        Runs before every allocation, so it returns at once unless a block
        was completed since last time (or the request is finishing, when the
        walk also marks its path as just used for LRU).
        """
        table = self.tables.get(request.request_id, [])
        num_blocks = min(len(table), request.num_computed_tokens // self.block_size)
        if num_blocks == 0 or (num_blocks <= self._num_cached.get(request.request_id, 0) and not finishing):
            return
        tokens = self.tokens_of(request)[: num_blocks * self.block_size]
        node = self.cache.insert(tokens, table[:num_blocks])
        # Where the tree already held these tokens (another request computed
        # them first), insert kept its own blocks: the request moves onto them
        # (Task 3.4), so the pool keeps one copy.
        self._use_tree_blocks(table, tokens)
        self.cache.lock(node)
        old = self._locked.pop(request.request_id, None)
        if old is not None:
            self.cache.unlock(old)
        self._locked[request.request_id] = node
        self._num_cached[request.request_id] = num_blocks
    # ANCHOR_END: cache_computed

    # ANCHOR: use_tree_blocks
    def _use_tree_blocks(self, table: list[int], tokens: Sequence) -> None:
        """Move a request onto the tree's blocks where its own blocks duplicate them.

        `tokens` are the request's first len(tokens) // block_size blocks of
        tokens, held in the first blocks of its `table`, and insert has just
        cached them; where the tree held them already (another request
        computed them first), insert kept the tree's blocks and left the
        request's duplicates to the request. Afterwards the table holds, at
        each of those positions, the block the tree holds, so the pool keeps
        one copy: each block the table took has one more allocator reference
        (the request's), each duplicate it gave up one fewer (free again unless
        someone else still holds it). Positions that held the tree's block
        already are unchanged. Example (blocks of 1): request a computed
        [1 2] into blocks 3 and 4, now cached; request b computed [1 2] into
        its own blocks 7 and 8 and caches them: afterwards b's table starts
        [3, 4], and the reference counts of blocks 3, 4, 7 and 8 are what
        the rule above makes them (the test reads all four).
        """
        # Nudge: which copy stays, and who holds a reference on it afterwards?
        # Hint 1: The two copies hold the same K/V, so one can go. The tree's stays: other
        #   requests may already read it, and insert did not take the request's. The request
        #   becomes one more user of the tree's block (a reference of its own, as chapter 2's
        #   share_blocks takes) and stops using its duplicate (chapter 2's free drops its
        #   reference, so a block someone else still holds survives). The table must then
        #   name the block it holds a reference on.
        # Hint 2: self.cache.match_prefix(tokens, touch=False).blocks lists the tree's blocks for
        #   tokens, position by position. Wherever it differs from the table: share the tree's
        #   block with the allocator, free the table's, and put the tree's block in the table.
        #   In the example, blocks 3 and 4 end with three references each (the tree, a and b),
        #   and blocks 7 and 8 with none: free again.
        # Hint 3:
        #   for i, block in enumerate(cache.match_prefix(tokens, touch=False).blocks):
        #       if table[i] != block:
        #           allocator.share(block); allocator.free(table[i]); table[i] = block
        # BEGIN SOLUTION 3.4: Start on the cached prefix, cache what is computed
        for i, block in enumerate(self.cache.match_prefix(tokens, touch=False).blocks):
            if table[i] != block:
                self.allocator.share(block)
                self.allocator.free(table[i])
                table[i] = block
        # END SOLUTION
    # ANCHOR_END: use_tree_blocks

    def free(self, request: Request) -> None:
        """Cache what the request computed, then drop its lock and its share of every block."""
        self._cache_computed(request, finishing=True)
        self._num_cached.pop(request.request_id, None)
        node = self._locked.pop(request.request_id, None)
        if node is not None:
            self.cache.unlock(node)
        super().free(request)

    def check_integrity(self) -> None:
        """free + cached-only + in use == total; every block's ref count = its owners."""
        self.cache.check_integrity()
        in_tables = [b for table in self.tables.values() for b in table]
        in_tree = self.cache.blocks()
        owners: dict[int, int] = {}
        for block in in_tables + in_tree:
            owners[block] = owners.get(block, 0) + 1
        for block, count in owners.items():
            assert self.allocator.ref_count(block) == count, (
                f"Task 3.4: block {block} has {self.allocator.ref_count(block)} allocator references and {count} owners (the "
                "tree and each block table holding it): every owner holds exactly one reference"
            )
        cached_only = set(in_tree) - set(in_tables)
        free, total = self.allocator.num_free, self.allocator.num_blocks
        assert free + len(cached_only) + len(set(in_tables)) == total, (
            f"Task 3.4: {free} free + {len(cached_only)} cached only + {len(set(in_tables))} in tables != {total} blocks: a block was lost or counted twice"
        )
        assert self.cache.root.lock_ref == len(self._locked), (
            f"Task 3.4: the root counts {self.cache.root.lock_ref} locks, and {len(self._locked)} requests hold one "
            f"({'; '.join(f'{rid} on {self.cache._where(node)}' for rid, node in self._locked.items())}): one lock per request on the cache, "
            "taken at admission (or by _cache_computed), recorded in _locked, and dropped by free"
        )
