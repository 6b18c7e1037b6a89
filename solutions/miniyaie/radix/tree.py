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
        # Nudge: where can a match end, and which node then protects every block it matched?
        # Hint 1: Children are keyed by the first block of their edge, so the next block of the
        #   query picks at most one child. An edge is several blocks long and may match only
        #   partly: the match then ends inside that edge, and that edge's node is the one to
        #   return (locking it keeps every matched block). Only whole blocks count.
        # Hint 2: Start at the root with length 0 and no blocks. While a whole block of the query is
        #   left: look up the child keyed by the next block; none, stop. Count the whole blocks
        #   its edge shares with the rest of the query (self._common_blocks), take that many of
        #   its blocks, advance length, move to the child and stamp it when `touch`. If the edge
        #   matched only in part, stop. Return PrefixMatch(length, blocks, node).
        # Hint 3:
        #   node, length, blocks, now = root, 0, [], next(_clock)
        #   while len(tokens) - length >= block_size:
        #       child = node.children.get(first block of tokens[length:]); if child is None: break
        #       shared = _common_blocks(child.key, tokens[length:])
        #       blocks += child.blocks[:shared]; length += shared * block_size; node = child
        #       if touch: child.last_access = now
        #       if shared * block_size < len(child.key): break
        #   return PrefixMatch(length, blocks, node)
        # BEGIN SOLUTION 3.2: Match the longest cached prefix
        node, length, blocks, now = self.root, 0, [], next(_clock)
        while len(tokens) - length >= self.block_size:
            child = node.children.get(self._first_block(tokens[length:]))
            if child is None:
                break
            shared = self._common_blocks(child.key, tokens[length:])
            blocks += child.blocks[:shared]
            length += shared * self.block_size
            node = child
            if touch:
                child.last_access = now
            if shared * self.block_size < len(child.key):
                break
        return PrefixMatch(length, blocks, node)
        # END SOLUTION
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
        # Nudge: what must stay true of paths and blocks when the tokens leave an edge halfway?
        # Hint 1: The invariant: every cached block-aligned prefix is spelled by exactly one path
        #   and held by exactly one block, and every edge is a whole number of blocks. So walk
        #   down as far as the tree already spells the tokens; where they leave an edge partway,
        #   cut the edge in two at that block boundary; whatever is left becomes one new edge.
        #   The tree owns the blocks of the new part only (one reference each).
        # Hint 2: From the root, with `done` tokens placed: the child keyed by the next block of
        #   the rest is the only candidate. None: the rest becomes a new leaf under the node (or,
        #   when the node is a leaf other than the root, the node's edge grows by the rest); share
        #   those blocks with the allocator, add them to cached_blocks (and to evictable_blocks
        #   if that node is unlocked), return that node. Otherwise count the blocks the child's edge shares with the rest;
        #   if fewer than the edge's length, split the child there (_split, which you also
        #   write: the upper part becomes a new node between the parent and the child). Stamp
        #   the child, descend, advance done. When every token is placed, return the node.
        # Hint 3:
        #   node, done, now = root, 0, next(_clock)
        #   while done < len(tokens):
        #       rest = tokens[done:]; child = node.children.get(first block of rest)
        #       if child is None:
        #           new = blocks[done // block_size :]; share each with the allocator
        #           if node is a leaf and not the root: node.key += rest; node.blocks += new
        #           else: node = Node(rest, new, parent=node, last_access=now); attach it
        #           cached_blocks += len(new); evictable_blocks += len(new) (if unlocked)
        #           return node
        #       shared = _common_blocks(child.key, rest)
        #       if shared * block_size < len(child.key): child = _split(child, shared)
        #       child.last_access = now; node, done = child, done + shared * block_size
        #   return node
        # BEGIN SOLUTION 3.1: Insert with node split
        node, done, now = self.root, 0, next(_clock)
        while done < len(tokens):
            rest = tokens[done:]
            child = node.children.get(self._first_block(rest))
            if child is None and node is not self.root and node.is_leaf:
                # Extending a leaf (a request caching its next blocks): grow its edge.
                new_blocks = list(blocks[done // self.block_size :])
                for block in new_blocks:
                    self.allocator.share(block)
                node.key += tuple(rest)
                node.blocks += new_blocks
                self.cached_blocks += len(new_blocks)
                if node.lock_ref == 0:
                    self.evictable_blocks += len(new_blocks)
                return node
            if child is None:
                leaf = Node(tuple(rest), list(blocks[done // self.block_size :]), parent=node, last_access=now)
                for block in leaf.blocks:
                    self.allocator.share(block)
                node.children[self._first_block(rest)] = leaf
                self.cached_blocks += len(leaf.blocks)
                self.evictable_blocks += len(leaf.blocks)
                return leaf
            shared = self._common_blocks(child.key, rest)
            if shared * self.block_size < len(child.key):
                child = self._split(child, shared)
            child.last_access = now
            node, done = child, done + shared * self.block_size
        return node
        # END SOLUTION

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
        # Nudge: only the shape changes: what must a node put in the middle inherit?
        # Hint 1: Paths must keep spelling the same sequences and blocks must keep their owners:
        #   only the shape changes. The new upper node sits where child was (same parent, same
        #   key in the parent's children), and carries child's lock count (a lock below it
        #   counts on it too) and last_access.
        # Hint 2: cut = num_blocks * block_size. Make upper with key child.key[:cut], blocks
        #   child.blocks[:num_blocks], child's parent, lock_ref and last_access. Hang child under
        #   upper, keyed by the first block of child.key[cut:]; put upper in the parent's
        #   children where child was; shorten child's key and blocks to the rest; child's parent
        #   is now upper.
        # Hint 3:
        #   cut = num_blocks * block_size
        #   upper = Node(child.key[:cut], child.blocks[:num_blocks], child.parent, lock_ref=child.lock_ref,
        #                last_access=child.last_access)
        #   upper.children[first block of child.key[cut:]] = child
        #   child.parent.children[first block of child.key] = upper
        #   child.key, child.blocks, child.parent = child.key[cut:], child.blocks[num_blocks:], upper
        #   return upper
        # BEGIN SOLUTION 3.1: Insert with node split
        cut = num_blocks * self.block_size
        upper = Node(child.key[:cut], child.blocks[:num_blocks], child.parent, lock_ref=child.lock_ref, last_access=child.last_access)
        upper.children[self._first_block(child.key[cut:])] = child
        child.parent.children[self._first_block(child.key)] = upper
        child.key, child.blocks, child.parent = child.key[cut:], child.blocks[num_blocks:], upper
        return upper
        # END SOLUTION
    # ANCHOR_END: insert

    # ANCHOR: lock
    def lock(self, node: Node) -> None:
        """Protect the path from `node` to the root from eviction (one more user).

        Afterwards every node on that path, the root included, counts one
        more lock in lock_ref, and evictable_blocks still counts exactly the
        blocks of the nodes whose lock_ref is 0.
        """
        # Nudge: what does one more user change on the path, and what does evictable_blocks need to know of it?
        # Hint 1: A request using a prefix needs every block on its path to stay, so the lock goes
        #   on the whole path: a node's lock count is the number of users below or at it, never
        #   less than any child's. evictable_blocks counts the blocks of unlocked nodes, so it
        #   changes only when a node goes from unlocked to locked.
        # Hint 2: From `node` up to and including the root: if its lock_ref is 0, subtract its
        #   blocks from evictable_blocks; add one to its lock_ref; go to the parent.
        # Hint 3:
        #   while node is not None:
        #       if node.lock_ref == 0: evictable_blocks -= len(node.blocks)
        #       node.lock_ref += 1; node = node.parent
        # BEGIN SOLUTION 3.3: The radix tree's locks and eviction
        while node is not None:
            if node.lock_ref == 0:
                self.evictable_blocks -= len(node.blocks)
            node.lock_ref += 1
            node = node.parent
        # END SOLUTION

    def unlock(self, node: Node) -> None:
        """One user fewer on the path from `node` to the root: undoes one lock(node).

        evictable_blocks still counts exactly the blocks of the nodes whose
        lock_ref is 0. An unlock(node) that no earlier lock(node) of that same
        node is left to undo is a caller's bug: ValueError, and nothing
        changes. Examples (blocks of 2): with [1 1] locked, unlocking the node
        of an unlocked [2 2] is refused; with [1 1 2 2] locked and [1 1 3 3]
        cached beside it, unlocking the node spelling [1 1] is refused too.
        """
        # Nudge: what must be checked before anything changes?
        # Hint 1: Every lock is undone by exactly one unlock of the same node. A count reaching 0
        #   makes its node evictable again; an unlock too many would hide a bug, so refuse it
        #   before changing anything. A node's own locks are its count less its children's
        #   counts (a lock below counts on it too); the counts only grow towards the root, so
        #   checking the node itself is enough.
        # Hint 2: If node.lock_ref minus the sum of its children's lock_ref is 0 or less, raise
        #   ValueError. Then from `node` up to the root: subtract one; if it reached 0, add its
        #   blocks to evictable_blocks; go to the parent.
        # Hint 3:
        #   if node.lock_ref - sum(c.lock_ref for c in node.children.values()) <= 0:
        #       raise ValueError("unlock of a node that holds no lock of its own")
        #   while node is not None:
        #       node.lock_ref -= 1
        #       if node.lock_ref == 0: evictable_blocks += len(node.blocks)
        #       node = node.parent
        # BEGIN SOLUTION 3.3: The radix tree's locks and eviction
        if node.lock_ref - sum(child.lock_ref for child in node.children.values()) <= 0:
            raise ValueError(f"unlock of a node that holds no lock of its own (lock_ref {node.lock_ref}, all from locks below it)")
        while node is not None:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_blocks += len(node.blocks)
            node = node.parent
        # END SOLUTION
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
        # Nudge: which nodes may go, and in what order?
        # Hint 1: Leaves only, so a shared prefix outlives the suffixes hanging off it; unlocked
        #   only, so no running request loses its prefix; oldest first (LRU). A parent whose last
        #   child goes is a leaf from then on, and competes by its own last_access: not evicted at
        #   once, and not last either (match_prefix([1]) after inserting [1 2], [1 3], [9] makes
        #   [1] outlive [9] through evict(3)). The counters
        #   (cached_blocks, evictable_blocks) must match the tree after every eviction. The root
        #   holds no blocks and stays even when it becomes a leaf.
        # Hint 2: Put every unlocked leaf except the root in a heap keyed by last_access, with a
        #   tie-breaker from a running count (nodes do not compare; id(node) would order ties
        #   differently from run to run, and hypothesis cannot replay a failure). While fewer than num_blocks are
        #   freed and the heap is not empty: pop the oldest leaf, free each of its blocks with the
        #   allocator, count them, subtract them from both counters, remove the leaf from its
        #   parent's children; if the parent is now an unlocked leaf and not the root, push it.
        # Hint 3:
        #   order = itertools.count()
        #   heap = [(n.last_access, next(order), n) for n in _nodes() if n.is_leaf and n.lock_ref == 0 and n is not root]
        #   heapify(heap); freed = 0
        #   while freed < num_blocks and heap:
        #       leaf = heappop(heap)[2]; free its blocks; freed += len(leaf.blocks)
        #       cached_blocks -= len(leaf.blocks); evictable_blocks -= len(leaf.blocks)
        #       parent = leaf.parent; del parent.children[first block of leaf.key]
        #       if parent.is_leaf and parent.lock_ref == 0 and parent is not root:
        #           heappush(heap, (parent.last_access, next(order), parent))
        #   return freed
        # BEGIN SOLUTION 3.3: The radix tree's locks and eviction
        order = itertools.count()  # ties go to the node found first, the same way every run
        heap = [(n.last_access, next(order), n) for n in self._nodes() if n.is_leaf and n.lock_ref == 0 and n is not self.root]
        heapq.heapify(heap)
        freed = 0
        while freed < num_blocks and heap:
            _, _, leaf = heapq.heappop(heap)
            for block in leaf.blocks:
                self.allocator.free(block)
            freed += len(leaf.blocks)
            self.cached_blocks -= len(leaf.blocks)
            self.evictable_blocks -= len(leaf.blocks)
            parent = leaf.parent
            del parent.children[self._first_block(leaf.key)]
            if parent.is_leaf and parent.lock_ref == 0 and parent is not self.root:
                heapq.heappush(heap, (parent.last_access, next(order), parent))
        return freed
        # END SOLUTION
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
