"""The radix tree: cached token sequences and the KV blocks that hold them.

Every edge is labelled with tokens, a whole number of blocks long, and owns
those blocks (one allocator reference each). A path from the root spells a
cached sequence; two sequences with a common prefix share its nodes, so its
K/V are stored once.

Requests *lock* the node where their cached prefix ends: a lock counts on
every node up to the root, and a node with a lock count above zero is never
evicted. Unlocked leaves are evicted least recently used first, which frees
their blocks; a node whose children are all gone is a leaf too.
"""

from __future__ import annotations

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
    # The node a caller locks to keep the match (the root when nothing matched): locking it protects every
    # matched block, and no node nearer the root does.
    node: Node
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
        """The longest cached prefix of `tokens`, in whole blocks (see PrefixMatch for which node it returns).

        Only whole blocks match: a block of the query that differs from the
        tree's in any token ends the match before it. `touch` stamps every
        node the match passes through (the partly matched one too): its
        last_access becomes a value of next(_clock) taken during the call,
        later than every stamp before it (one value for the walk or one per
        node, either is right); eviction (Task 3.3) takes the least recently
        used leaf first. A peek (the scheduler's prefix-length oracle) passes
        touch=False and changes nothing.
        """
        # Idea: where can a match end, and which node then protects every block it matched?
        # Stuck? `miniyaie hint 3.2` prints hints, one level at a time.
        # TODO(Task 3.2): Match the longest cached prefix. Replace this line with your code.
        raise NotImplementedError('Chapter 3, Task 2: Match the longest cached prefix — see book/src/ch03_radix_tree.md')
    # ANCHOR_END: match_prefix

    # ANCHOR: insert
    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> Node:
        """Cache `tokens` (whole blocks), held in `blocks`; returns the node whose path from the root spells exactly `tokens`.

        The part already cached is left as it is (the caller's duplicate
        blocks stay the caller's). Afterwards every cached block-aligned
        prefix is spelled by exactly one path and held by exactly one block,
        on which the tree holds one allocator reference; every edge is a
        whole number of blocks, and a node ends exactly where `tokens` ends
        (even partway along an old edge); the shape is otherwise yours.
        cached_blocks counts the blocks the tree holds, and evictable_blocks
        exactly those of the nodes whose lock_ref is 0.
        Every node below the root on the path to the returned node, one that
        insert created or grew included, is stamped in last_access with a
        value of next(_clock) later than every stamp before the call.
        Inserting no tokens returns the root.
        """
        assert len(tokens) == len(blocks) * self.block_size, "insert whole blocks only"
        # Idea: what must stay true of paths and blocks when the tokens leave an edge halfway?
        # Stuck? `miniyaie hint 3.1` prints hints, one level at a time.
        # TODO(Task 3.1): Insert with node split. Replace this line with your code.
        raise NotImplementedError('Chapter 3, Task 1: Insert with node split — see book/src/ch03_radix_tree.md')

    def _split(self, child: Node, num_blocks: int) -> Node:
        """Cut `child`'s edge after `num_blocks` blocks (0 < num_blocks < its length); returns the new upper node.

        Afterwards the upper node's path from the root spells the edge's first
        num_blocks blocks, `child`'s path still spells what it spelled before,
        each prefix is held by the same block as before, and every invariant
        of the tree still holds (the module docstring's locks included).
        Example (blocks of 2): [1 1 2 2] cached as one edge and locked once;
        inserting [1 1 3 3] cuts it after [1 1]; afterwards evictable_blocks
        is 1 (the new leaf [3 3]), and one unlock of the [1 1 2 2] node makes
        all three blocks evictable.
        """
        # Idea: only the shape changes: what must a node put in the middle inherit?
        # Stuck? `miniyaie hint 3.1` prints hints, one level at a time.
        # TODO(Task 3.1): Insert with node split. Replace this line with your code.
        raise NotImplementedError('Chapter 3, Task 1: Insert with node split — see book/src/ch03_radix_tree.md')
    # ANCHOR_END: insert

    # ANCHOR: lock
    def lock(self, node: Node) -> None:
        """Protect the path from `node` to the root from eviction (one more user).

        Afterwards every node on that path, the root included, counts one
        more lock in lock_ref, and evictable_blocks still counts exactly the
        blocks of the nodes whose lock_ref is 0.
        """
        # Idea: what does one more user change on the path, and what does evictable_blocks need to know of it?
        # Stuck? `miniyaie hint 3.3` prints hints, one level at a time.
        # TODO(Task 3.3): The radix tree's locks and eviction. Replace this line with your code.
        raise NotImplementedError("Chapter 3, Task 3: The radix tree's locks and eviction — see book/src/ch03_radix_tree.md")

    def unlock(self, node: Node) -> None:
        """One user fewer on the path from `node` to the root: undoes one lock(node).

        evictable_blocks still counts exactly the blocks of the nodes whose
        lock_ref is 0. An unlock(node) that no earlier lock(node) of that same
        node is left to undo is a caller's bug: ValueError, and nothing
        changes. Examples (blocks of 2): with [1 1] locked, unlocking the node
        of an unlocked [2 2] is refused; with [1 1 2 2] locked and [1 1 3 3]
        cached beside it, unlocking the node spelling [1 1] is refused too.
        """
        # Idea: what must be checked before anything changes?
        # Stuck? `miniyaie hint 3.3` prints hints, one level at a time.
        # TODO(Task 3.3): The radix tree's locks and eviction. Replace this line with your code.
        raise NotImplementedError("Chapter 3, Task 3: The radix tree's locks and eviction — see book/src/ch03_radix_tree.md")
    # ANCHOR_END: lock

    # ANCHOR: evict
    def evict(self, num_blocks: int) -> int:
        """Give up at least `num_blocks` cached blocks (if that many are evictable), LRU leaves first.

        Only unlocked leaves are evicted, whole (all their blocks), one at a
        time, least recently used (smallest last_access) first. The root is
        never evicted. Stops as soon as num_blocks are given up, or nothing is
        left to evict. Returns the number of blocks the tree gave up: it drops
        its allocator reference on each, so each is free again unless another
        owner still holds it. Examples: (one-token blocks) [1 2], [1 3] and
        [9] inserted in that order, then evict(3) leaves only [9] cached;
        (blocks of 2) with [2 2 2 2] a two-block leaf, the least recently
        used, evict(1) gives up both blocks and returns 2.
        """
        if num_blocks <= 0:  # runs before every allocation: most of the time there is nothing to walk the tree for
            return 0
        # Idea: which nodes may go, and in what order?
        # Stuck? `miniyaie hint 3.3` prints hints, one level at a time.
        # TODO(Task 3.3): The radix tree's locks and eviction. Replace this line with your code.
        raise NotImplementedError("Chapter 3, Task 3: The radix tree's locks and eviction — see book/src/ch03_radix_tree.md")
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

    def _where(self, node: Node) -> str:
        """A node named for a message: the tokens its path spells, and its lock count and its children's."""
        path, up = [], node
        while up is not None:
            path[:0], up = up.key, up.parent
        return f"the node spelling {tuple(path)} (lock_ref {node.lock_ref}, its children's {[c.lock_ref for c in node.children.values()]})"

    def check_integrity(self) -> None:
        """The counters agree with the tree, and every lock is accounted for on its parent."""
        nodes = self._nodes()
        held, unlocked = sum(len(n.blocks) for n in nodes), sum(len(n.blocks) for n in nodes if n.lock_ref == 0)
        assert self.cached_blocks == held, f"Task 3.1 or 3.3: cached_blocks is {self.cached_blocks}; the nodes hold {held} blocks"
        assert self.evictable_blocks == unlocked, (
            f"Task 3.1 or 3.3: evictable_blocks is {self.evictable_blocks}; the unlocked nodes (lock_ref 0) hold {unlocked} blocks"
        )
        for node in nodes:
            assert node.lock_ref >= 0, f"Task 3.3: {self._where(node)}: a lock count went negative"
            assert len(node.key) == len(node.blocks) * self.block_size, (
                f"Task 3.1: {self._where(node)} has {len(node.blocks)} blocks for {len(node.key)} tokens: an edge holds whole blocks, one per block of tokens"
            )
            assert node.lock_ref >= sum(c.lock_ref for c in node.children.values()), (
                f"Task 3.1 or 3.3: {self._where(node)} counts fewer locks than its children: a lock counts on every node up to "
                "the root (lock walks the whole path, and a node insert or _split creates carries the locks below it, no others)"
            )
            for first, child in node.children.items():
                assert child.parent is node, f"Task 3.1: {self._where(child)} sits in the children of a node that is not its parent"
                assert self._first_block(child.key) == first, f"Task 3.1: {self._where(child)} is keyed {first}: children are keyed by their first block"
            for block in node.blocks:
                assert self.allocator.ref_count(block) >= 1, (
                    f"Task 3.1, 3.3 or 3.4: {self._where(node)} holds block {block}, which is free: the tree keeps one allocator "
                    "reference on every block it caches until evict takes the block out of the tree"
                )
