"""The radix tree against a model of what it caches, under memory pressure (tasks 3.1-3.3 together).

The model is the set of block-aligned prefixes the tree should hold: every
cached block is exactly one such prefix, so the set also counts the blocks.
"""

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from miniyaie.paged import BlockAllocator
from miniyaie.radix import RadixCache

pytestmark = [pytest.mark.task(f"3.{n}") for n in range(1, 4)]
tokens = st.lists(st.integers(0, 2), max_size=12)


class RadixMachine(RuleBasedStateMachine):
    @initialize(block_size=st.sampled_from([1, 2, 3]), num_blocks=st.integers(2, 12))
    def setup(self, block_size, num_blocks):
        self.bs = block_size
        self.tree = RadixCache(BlockAllocator(num_blocks), block_size)
        self.prefixes: set[tuple[int, ...]] = set()
        self.locks: list[tuple[object, tuple[int, ...]]] = []  # (node, the prefix that lock protects)

    def _aligned(self, seq):
        return tuple(seq[: len(seq) // self.bs * self.bs])

    def _expected_match(self, query) -> int:
        n = 0
        while n + self.bs <= len(query) and tuple(query[: n + self.bs]) in self.prefixes:
            n += self.bs
        return n

    @rule(seq=tokens)
    def insert_like_a_finished_request(self, seq):
        seq = self._aligned(seq)
        allocator = self.tree.allocator
        needed = len(seq) // self.bs
        if needed > allocator.num_free:
            self.evict(needed - allocator.num_free)
        if needed > allocator.num_free:
            return  # everything left is locked: the request could not have run
        blocks = allocator.allocate_many(needed)
        self.tree.insert(seq, blocks)
        for block in blocks:
            allocator.free(block)
        self.prefixes |= {seq[:n] for n in range(self.bs, len(seq) + 1, self.bs)}

    @rule(query=tokens)
    def match(self, query):
        match = self.tree.match_prefix(query)
        assert match.length == self._expected_match(query)
        assert len(match.blocks) == match.length // self.bs

    @precondition(lambda self: self.prefixes)
    @rule(data=st.data())
    def lock(self, data):
        prefix = data.draw(st.sampled_from(sorted(self.prefixes)))
        match = self.tree.match_prefix(prefix)
        self.tree.lock(match.node)
        self.locks.append((match.node, prefix))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data):
        node, _ = self.locks.pop(data.draw(st.integers(0, len(self.locks) - 1)))
        self.tree.unlock(node)

    @rule(n=st.integers(1, 6))
    def evict(self, n):
        free_before, evictable = self.tree.allocator.num_free, self.tree.evictable_blocks
        stamps = {p: self.tree.match_prefix(p, touch=False).node.last_access for p in self.prefixes}
        freed = self.tree.evict(n)
        assert freed >= min(n, evictable), "evicts what was asked when it can"
        assert self.tree.allocator.num_free == free_before + freed, "eviction frees exactly the evicted blocks"
        survivors = {p for p in self.prefixes if self.tree.match_prefix(p, touch=False).length == len(p)}
        assert len(self.prefixes) - len(survivors) == freed, "each freed block is one evicted prefix"
        for _, prefix in self.locks:
            assert prefix in survivors, "a locked prefix is never evicted"
        evicted = [stamps[p] for p in self.prefixes - survivors]
        candidates = [node.last_access for node in self._nodes() if not node.children and node.lock_ref == 0 and node is not self.tree.root]
        if evicted and candidates:
            assert max(evicted) <= min(candidates), (
                f"evict took a node last used at {max(evicted)} and kept an unlocked leaf last used at {min(candidates)}: "
                "least recently used first, and a parent that becomes a leaf competes by its own last use"
            )
        self.prefixes = survivors

    def _nodes(self):
        out, stack = [], [self.tree.root]
        while stack:
            out.append(stack.pop())
            stack.extend(out[-1].children.values())
        return out

    @invariant()
    def consistent(self):
        if not hasattr(self, "tree"):
            return
        self.tree.check_integrity()
        assert self.tree.cached_blocks == len(self.prefixes)
        assert self.tree.allocator.num_free + self.tree.cached_blocks == self.tree.allocator.num_blocks


def test_radix_state_machine():
    run_state_machine_as_test(RadixMachine, settings=settings(max_examples=150, stateful_step_count=30))
