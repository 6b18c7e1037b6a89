"""The radix tree: cached token sequences and the KV blocks that hold them.

Every edge is labelled with tokens, a whole number of blocks long, and owns
those blocks (one allocator reference each). A path from the root spells a
cached sequence; two sequences with a common prefix share its nodes, so its
K/V are stored once.

Requests *lock* the node where their cached prefix ends: a lock counts on
every node up to the root, and a node with a lock count above zero is never
evicted. Unlocked leaves are evicted least recently used first, which frees
their blocks, and may turn their parent into an evictable leaf.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from miniyaie.paged import BlockAllocator

_clock = itertools.count()


# ANCHOR: node
@dataclass(eq=False)
class Node:
    key: tuple[int, ...] = ()  # the tokens on the edge into this node
    blocks: list[int] = field(default_factory=list)  # len(key) // block_size blocks
    parent: Node | None = None
    children: dict[tuple[int, ...], Node] = field(default_factory=dict)  # by the first block of tokens
    lock_ref: int = 0
    last_access: int = 0

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class PrefixMatch:
    length: int  # tokens of the query found in the tree (a multiple of the block size)
    blocks: list[int]  # the blocks holding them, in order
    node: Node  # the deepest node the match reaches (lock it to keep the prefix)
# ANCHOR_END: node


class RadixCache:
    def __init__(self, allocator: BlockAllocator, block_size: int):
        self.allocator, self.block_size = allocator, block_size
        self.root = Node()  # holds no tokens and is never evicted
        self.evictable_blocks = 0  # blocks of nodes no request has locked
        self.cached_blocks = 0  # blocks the tree holds a reference on

    def _first_block(self, tokens: Sequence[int]) -> tuple[int, ...]:
        return tuple(tokens[: self.block_size])

    def _common_blocks(self, key: tuple[int, ...], tokens: Sequence[int]) -> int:
        """How many whole blocks `key` and `tokens` share from the start."""
        n, bs = 0, self.block_size
        while (n + 1) * bs <= min(len(key), len(tokens)) and key[n * bs : (n + 1) * bs] == tuple(tokens[n * bs : (n + 1) * bs]):
            n += 1
        return n

    # ANCHOR: match_prefix
    def match_prefix(self, tokens: Sequence[int], touch: bool = True) -> PrefixMatch:
        """The longest cached prefix of `tokens`, in whole blocks.

        `touch` marks the path as just used (for LRU); a peek (the scheduler's
        prefix-length oracle) passes touch=False.
        """
        # Hint: start at the root; while the next block of tokens is a key in
        # node.children, count how many whole blocks the child's key shares
        # with the rest of the tokens (self._common_blocks), take that many
        # of its blocks, and descend only if the whole key matched. When
        # `touch`, stamp every node you pass with one fresh time,
        # now = next(_clock), in node.last_access: eviction (Task 3.3) takes
        # the least recently used leaf first.
        # TODO(Task 3.2): Match the longest cached prefix. Replace this line with your code.
        raise NotImplementedError('Chapter 3, Task 2: Match the longest cached prefix — see book/src/ch03_radix_tree.md')
    # ANCHOR_END: match_prefix

    # ANCHOR: insert
    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> Node:
        """Cache `tokens` (whole blocks), held in `blocks`; returns the node where they end.

        The part already cached is left as it is (the caller's duplicate
        blocks stay the caller's); the tree takes a reference on the blocks of
        the new part.
        """
        assert len(tokens) == len(blocks) * self.block_size, "insert whole blocks only"
        # Hint: walk like match_prefix. When a child's key matches only in
        # part, split it there (self._split). When no child starts with the
        # next block, add a leaf with the remaining tokens and blocks (or, if
        # the node is itself a leaf other than the root, extend its edge: a
        # request caching its next blocks grows its own leaf instead of
        # chaining one node per block): share each new block with the
        # allocator, count it in cached_blocks, and in evictable_blocks when
        # its node is unlocked. Stamp the nodes you pass or create with
        # now = next(_clock) in last_access, as match_prefix does.
        # TODO(Task 3.1): Insert with node split. Replace this line with your code.
        raise NotImplementedError('Chapter 3, Task 1: Insert with node split — see book/src/ch03_radix_tree.md')
    # ANCHOR_END: insert

    def _split(self, child: Node, num_blocks: int) -> Node:
        """Cut `child`'s edge after `num_blocks` blocks; returns the new upper node."""
        cut = num_blocks * self.block_size
        upper = Node(child.key[:cut], child.blocks[:num_blocks], child.parent, lock_ref=child.lock_ref, last_access=child.last_access)
        upper.children[self._first_block(child.key[cut:])] = child
        child.parent.children[self._first_block(child.key)] = upper
        child.key, child.blocks, child.parent = child.key[cut:], child.blocks[num_blocks:], upper
        return upper

    # ANCHOR: lock
    def lock(self, node: Node) -> None:
        """Protect the path from `node` to the root from eviction (one more user)."""
        # Hint: walk up to the root; a node whose lock_ref goes from 0 to 1
        # stops being evictable (subtract its blocks from evictable_blocks).
        # TODO(Task 3.4): Lock and unlock. Replace this line with your code.
        raise NotImplementedError('Chapter 3, Task 4: Lock and unlock — see book/src/ch03_radix_tree.md')

    def unlock(self, node: Node) -> None:
        """One user fewer on the path from `node` to the root."""
        # Hint: the mirror image of lock; a lock_ref must never go below 0.
        # TODO(Task 3.4): Lock and unlock. Replace this line with your code.
        raise NotImplementedError('Chapter 3, Task 4: Lock and unlock — see book/src/ch03_radix_tree.md')
    # ANCHOR_END: lock

    # ANCHOR: evict
    def evict(self, num_blocks: int) -> int:
        """Free at least `num_blocks` blocks (if that many are evictable), LRU leaves first.

        Returns the number of blocks freed.
        """
        if num_blocks <= 0:  # runs before every allocation: most of the time there is nothing to walk the tree for
            return 0
        # Hint: put every unlocked leaf in a heap keyed by last_access. Pop the
        # oldest, free its blocks (allocator.free; they return to the free
        # list), remove it from its parent's children and update the counters;
        # if the parent is now an unlocked leaf, push it too, except the root
        # (it holds no blocks and is never evicted).
        # TODO(Task 3.3): Evict least recently used leaves. Replace this line with your code.
        raise NotImplementedError('Chapter 3, Task 3: Evict least recently used leaves — see book/src/ch03_radix_tree.md')
    # ANCHOR_END: evict

    def _nodes(self) -> list[Node]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    def blocks(self) -> list[int]:
        """Every block the tree holds a reference on."""
        return [b for node in self._nodes() for b in node.blocks]

    def reset(self) -> None:
        """Drop the whole cache; only when no request holds a lock."""
        if self.root.lock_ref != 0:
            raise RuntimeError("cannot reset the prefix cache while requests use it")
        self.evict(self.cached_blocks)
        assert self.cached_blocks == 0 and not self.root.children

    def check_integrity(self) -> None:
        """The counters agree with the tree, and every lock is accounted for on its parent."""
        nodes = self._nodes()
        assert self.cached_blocks == sum(len(n.blocks) for n in nodes)
        assert self.evictable_blocks == sum(len(n.blocks) for n in nodes if n.lock_ref == 0)
        for node in nodes:
            assert node.lock_ref >= 0
            assert len(node.key) == len(node.blocks) * self.block_size
            assert node.lock_ref >= sum(c.lock_ref for c in node.children.values()), "a lock counts up to the root"
            for first, child in node.children.items():
                assert child.parent is node and self._first_block(child.key) == first
        for block in self.blocks():
            assert self.allocator.ref_count(block) >= 1
