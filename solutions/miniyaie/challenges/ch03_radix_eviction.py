"""Chapter 3's challenge: an eviction policy that beats LRU's hit rate on a multi-turn chat trace, in a small pool.

Your lever: a `make_cache(allocator, block_size)` in your `miniyaie/radix/challenge.py`, returning
a RadixCache (typically a subclass of yours whose `evict` chooses differently; the chapter's tests
pin `RadixCache.evict` to LRU). The default is your RadixCache as it is: plain LRU on your tree. The baseline
row is plain LRU on the reference's tree; a tree's shape moves plain LRU, so the line under the table gives
plain LRU on your own tree too, the number your make_cache has to beat.
Score: cached prompt tokens / prompt tokens over the trace (deterministic), counting only the matched
blocks that hold what the harness itself put there for that prefix. The reference's entry is its own
`make_cache`, in solutions/miniyaie/radix/challenge.py (the reference column runs it).
"""

from __future__ import annotations

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


def verified_blocks(prompt, blocks, held, allocator) -> int:
    """How many of `blocks`, from the first, hold what this harness put there for the prompt's own prefix.

    `held` maps a block to the tokens (from the start of a sequence) whose K/V it holds, as the harness
    recorded at its own inserts; a block counts while the tree still holds it and it holds the prompt's
    prefix up to that block. The first block that does not stops the count: only those are a real hit.
    """
    n = 0
    while n < len(blocks) and (n + 1) * BLOCK_SIZE <= len(prompt):
        block = blocks[n]
        if allocator.ref_count(block) < 1 or held.get(block) != tuple(prompt[: (n + 1) * BLOCK_SIZE]):
            break
        n += 1
    return n


def hit_rate(make_cache) -> float:
    """Serve the trace one turn at a time: match, lock, make room, cache prompt + answer, unlock.

    A hit counts only the matched blocks that verifiably hold the prompt's prefix (not what
    match_prefix claims), and the tree's integrity check runs at the end whatever the design.
    """
    from miniyaie.paged import BlockAllocator
    from miniyaie.radix import RadixCache

    allocator = BlockAllocator(NUM_BLOCKS)
    cache = make_cache(allocator, BLOCK_SIZE)
    if not isinstance(cache, RadixCache):
        raise TypeError(f"make_cache returned a {type(cache).__name__}; the challenge measures a RadixCache (or a subclass)")
    held: dict[int, tuple[int, ...]] = {}  # block -> the tokens from the start whose K/V the harness put in it
    hit = total = 0
    for prompt, answer in chat_trace(seed=0):
        match = cache.match_prefix(prompt)
        prefix = match.blocks[: verified_blocks(prompt, match.blocks, held, allocator)]
        hit, total = hit + len(prefix) * BLOCK_SIZE, total + len(prompt)
        cache.lock(match.node)
        sequence = prompt + answer
        whole = len(sequence) // BLOCK_SIZE * BLOCK_SIZE
        needed = whole // BLOCK_SIZE - len(prefix)
        if allocator.num_free < needed:
            cache.evict(needed - allocator.num_free)
        if allocator.num_free >= needed:
            blocks = allocator.allocate_many(needed)
            for i, block in enumerate(blocks, start=len(prefix)):
                held[block] = tuple(sequence[: (i + 1) * BLOCK_SIZE])
            cache.insert(sequence[:whole], prefix + blocks)
            for block in blocks:  # the tree holds its own reference now
                allocator.free(block)
        cache.unlock(match.node)
    RadixCache.check_integrity(cache)  # a design that breaks the tree's counters scores nothing
    return 100 * hit / total


def lru_cache(allocator, block_size):
    from miniyaie.radix import RadixCache

    return RadixCache(allocator, block_size)


def lru_on_your_tree(score: float) -> str:
    """The line under the table (in the learner's process): plain LRU on the learner's own tree, beside their score."""
    lru = hit_rate(lru_cache)
    if learner_design(3, "make_cache", None) is None:
        return ("No make_cache in your radix/challenge.py: 'yours' is plain LRU on your own tree. The baseline row is "
                "plain LRU on the reference's tree; a tree's shape moves plain LRU (the page says how much).")
    return (f"Plain LRU on your own tree (your RadixCache without make_cache): {lru:.4g}; your make_cache gains "
            f"{score - lru:+.2f} points over it (the baseline row is plain LRU on the reference's tree).")


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
    correctness_tests=["tests/ch03_radix_tree"],
    explain=lru_on_your_tree,
    extra={"baseline_label": "plain LRU on the reference's tree"},
)
