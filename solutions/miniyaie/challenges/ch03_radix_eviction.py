"""Chapter 3's challenge: an eviction policy that beats LRU's hit rate on a multi-turn chat trace, in a small pool.

Your lever: a `make_cache(allocator, block_size)` in your `miniyaie/radix/challenge.py`, returning
a RadixCache (typically a subclass of yours whose `evict` chooses differently; the chapter's tests
pin `RadixCache.evict` to LRU). The default, your RadixCache as it is, is LRU: the baseline.
Score: cached prompt tokens / prompt tokens over the trace (deterministic).
"""

from __future__ import annotations

import heapq
import random

from miniyaie.challenges.base import Challenge, learner_design

BLOCK_SIZE, NUM_BLOCKS = 16, 96
SYSTEM_PROMPTS, SYSTEM_LEN = 3, 96
SESSIONS, ACTIVE = 48, 6


def chat_trace(seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """(prompt, answer) per turn: sessions on one of a few system prompts, a few at a time, turns interleaved."""
    rng = random.Random(seed)
    systems = [[rng.randrange(1000) for _ in range(SYSTEM_LEN)] for _ in range(SYSTEM_PROMPTS)]
    new_session = lambda: {"history": list(rng.choice(systems)), "turns": rng.randint(2, 9)}  # noqa: E731
    waiting, active, trace = SESSIONS - ACTIVE, [new_session() for _ in range(ACTIVE)], []
    while active:
        session = rng.choice(active)
        prompt = session["history"] + [rng.randrange(1000) for _ in range(rng.randint(10, 60))]
        answer = [rng.randrange(1000) for _ in range(rng.randint(20, 120))]
        trace.append((prompt, answer))
        session["history"] = prompt + answer
        session["turns"] -= 1
        if session["turns"] == 0:
            active.remove(session)
            if waiting:
                waiting -= 1
                active.append(new_session())
    return trace


def hit_rate(make_cache) -> float:
    """Serve the trace one turn at a time: match, lock, make room, cache prompt + answer, unlock."""
    from miniyaie.paged import BlockAllocator

    allocator = BlockAllocator(NUM_BLOCKS)
    cache = make_cache(allocator, BLOCK_SIZE)
    hit = total = 0
    for prompt, answer in chat_trace(seed=0):
        match = cache.match_prefix(prompt)
        hit, total = hit + match.length, total + len(prompt)
        cache.lock(match.node)
        sequence = prompt + answer
        whole = len(sequence) // BLOCK_SIZE * BLOCK_SIZE
        needed = whole // BLOCK_SIZE - len(match.blocks)
        if allocator.num_free < needed:
            cache.evict(needed - allocator.num_free)
        if allocator.num_free >= needed:
            blocks = allocator.allocate_many(needed)
            cache.insert(sequence[:whole], match.blocks + blocks)
            for block in blocks:  # the tree holds its own reference now
                allocator.free(block)
        cache.unlock(match.node)
    if hasattr(cache, "check_integrity"):  # a design that breaks the tree's counters scores nothing
        cache.check_integrity()
    return 100 * hit / total


def lru_cache(allocator, block_size):
    from miniyaie.radix import RadixCache

    return RadixCache(allocator, block_size)


def reference_cache(allocator, block_size):
    """What the reference did: LRU, but a leaf gives up only the blocks still needed, from its end."""
    from miniyaie.radix import RadixCache

    class TrimTails(RadixCache):
        def evict(self, num_blocks: int) -> int:
            return evict_tails(self, num_blocks)

    return TrimTails(allocator, block_size)


def evict_tails(cache, num_blocks: int) -> int:
    """Free num_blocks from unlocked leaves, least recently used first, each trimmed from its end only as far as needed.

    A long conversation is one long leaf: whole-leaf LRU throws all of it away to make room for a
    few blocks, though its beginning is what the next turn would match.
    """
    if num_blocks <= 0:
        return 0
    nodes, stack = [], [cache.root]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children.values())
    heap = [(n.last_access, id(n), n) for n in nodes if n.is_leaf and n.lock_ref == 0 and n is not cache.root]
    heapq.heapify(heap)
    freed = 0
    while freed < num_blocks and heap:
        _, _, leaf = heapq.heappop(heap)
        take = min(len(leaf.blocks), num_blocks - freed)
        for block in leaf.blocks[len(leaf.blocks) - take:]:
            cache.allocator.free(block)
        freed += take
        cache.cached_blocks -= take
        cache.evictable_blocks -= take
        if take < len(leaf.blocks):  # keep the leaf's beginning: still a whole number of blocks
            leaf.blocks = leaf.blocks[:-take]
            leaf.key = leaf.key[: len(leaf.blocks) * cache.block_size]
            continue
        parent = leaf.parent
        del parent.children[tuple(leaf.key[: cache.block_size])]
        if parent.is_leaf and parent.lock_ref == 0 and parent is not cache.root:
            heapq.heappush(heap, (parent.last_access, id(parent), parent))
    return freed


CHALLENGE = Challenge(
    number=3,
    title="an eviction policy that beats LRU's hit rate on a multi-turn chat trace",
    metric="prefix-cache hit rate",
    unit="% of prompt tokens",
    higher_is_better=True,
    workload=(f"{SESSIONS} chat sessions of 2-9 turns, {ACTIVE} active at a time, on {SYSTEM_PROMPTS} system prompts of "
              f"{SYSTEM_LEN} tokens, seed 0; a pool of {NUM_BLOCKS} blocks of {BLOCK_SIZE} tokens; each turn caches "
              "its prompt and answer"),
    run=lambda: hit_rate(learner_design(3, "make_cache", lru_cache)),
    baseline=lambda: hit_rate(lru_cache),
    reference=lambda: hit_rate(reference_cache),
    correctness_tests=["tests/ch03_radix_tree"],
)
