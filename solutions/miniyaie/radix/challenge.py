"""The reference's entry to chapter 3's challenge (`miniyaie challenge 3`): read it once you have a score of your own.

It stays in solutions/: `course sync` does not copy a chapter package's
challenge.py into chapters/, where the learner writes their own.

Still least recently used first, but a leaf gives up only the blocks still
needed, from its end: a long conversation is one long leaf, and whole-leaf
LRU throws all of it away to make room for a few blocks, though its
beginning is what that session's next turn would match.
"""

from __future__ import annotations

import heapq
import itertools

from miniyaie.radix.tree import RadixCache


class TrimTails(RadixCache):
    def evict(self, num_blocks: int) -> int:
        """Free num_blocks from unlocked leaves, least recently used first, each cut from its end only as far as needed."""
        if num_blocks <= 0:
            return 0
        order = itertools.count()
        heap = [(n.last_access, next(order), n) for n in self._nodes() if n.is_leaf and n.lock_ref == 0 and n is not self.root]
        heapq.heapify(heap)
        freed = 0
        while freed < num_blocks and heap:
            _, _, leaf = heapq.heappop(heap)
            take = min(len(leaf.blocks), num_blocks - freed)
            for block in leaf.blocks[len(leaf.blocks) - take :]:
                self.allocator.free(block)
            freed += take
            self.cached_blocks -= take
            self.evictable_blocks -= take
            if take < len(leaf.blocks):  # keep the leaf's beginning: still a whole number of blocks
                leaf.blocks = leaf.blocks[:-take]
                leaf.key = leaf.key[: len(leaf.blocks) * self.block_size]
                continue
            parent = leaf.parent
            del parent.children[self._first_block(leaf.key)]
            if parent.is_leaf and parent.lock_ref == 0 and parent is not self.root:
                heapq.heappush(heap, (parent.last_access, next(order), parent))
        return freed


def make_cache(allocator, block_size):
    return TrimTails(allocator, block_size)
