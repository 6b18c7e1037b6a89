"""Chapter 3's tests name the mistakes a learner trial made (each once accepted by grading).

Each case replaces one piece of the reference radix cache with a plausible wrong answer, runs the
test of that piece's task that should catch it, and checks that it fails with a message naming the mistake.
"""

import heapq
import itertools
import re
from pathlib import Path

import pytest
from planted import import_planted

from miniyaie.paged import PagedMemory
from miniyaie.radix import memory, tree
from miniyaie.radix.tree import Node, _clock

pytestmark = pytest.mark.ungraded
CH03 = Path(__file__).resolve().parents[1] / "ch03_radix_tree"


def evict_parents_at_the_end(self, num_blocks):
    """A parent that becomes a leaf joins the end of the order instead of competing by its last use."""
    cands = sorted((n for n in self._nodes() if n is not self.root and n.is_leaf and n.lock_ref == 0), key=lambda n: n.last_access)
    freed = 0
    while cands and freed < num_blocks:
        leaf = cands.pop(0)
        for b in leaf.blocks:
            self.allocator.free(b)
        freed += len(leaf.blocks)
        self.cached_blocks -= len(leaf.blocks)
        self.evictable_blocks -= len(leaf.blocks)
        parent = leaf.parent
        del parent.children[self._first_block(leaf.key)]
        if parent is not self.root and parent.is_leaf and parent.lock_ref == 0:
            cands.append(parent)
    return freed


def evict_trimming_the_tail(self, num_blocks):
    """The reference evict, except that the LRU leaf gives up only the blocks still needed, from its end."""
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
        if take < len(leaf.blocks):
            leaf.blocks = leaf.blocks[:-take]
            leaf.key = leaf.key[: len(leaf.blocks) * self.block_size]
            break
        parent = leaf.parent
        del parent.children[self._first_block(leaf.key)]
        if parent.is_leaf and parent.lock_ref == 0 and parent is not self.root:
            heapq.heappush(heap, (parent.last_access, next(order), parent))
    return freed


def split_without_the_lock(self, child, num_blocks):
    """The new middle node starts unlocked."""
    cut = num_blocks * self.block_size
    upper = Node(child.key[:cut], child.blocks[:num_blocks], child.parent, last_access=child.last_access)
    upper.children[self._first_block(child.key[cut:])] = child
    child.parent.children[self._first_block(child.key)] = upper
    child.key, child.blocks, child.parent = child.key[cut:], child.blocks[num_blocks:], upper
    return upper


def evict_variant(wrong):
    """The reference evict with a parent evicted as soon as it becomes a leaf ("parent at once"), or the largest
    leaf first ("largest first", ties by id(node))."""

    def evict(self, num_blocks):
        nodes = [n for n in self._nodes() if n.is_leaf and n.lock_ref == 0 and n is not self.root]
        tie = id if wrong == "largest first" else (lambda node, count=itertools.count(): next(count))  # ids: run-dependent
        heap = [((-len(n.blocks) if wrong == "largest first" else n.last_access), tie(n), n) for n in nodes]
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
                key = -1 if wrong == "parent at once" else -len(parent.blocks)
                heapq.heappush(heap, (key, tie(parent), parent))
        return freed

    return evict


def insert_variant(stamp=True, locked_growth_evictable=False):
    """The reference insert, without stamping the path (stamp="path only": without stamping the leaf it creates), or
    counting a locked leaf's new blocks as evictable."""

    def insert(self, tokens, blocks):
        node, done, now = self.root, 0, next(_clock)
        while done < len(tokens):
            rest = tokens[done:]
            child = node.children.get(self._first_block(rest))
            if child is None and node is not self.root and node.is_leaf:
                new_blocks = list(blocks[done // self.block_size :])
                for block in new_blocks:
                    self.allocator.share(block)
                node.key += tuple(rest)
                node.blocks += new_blocks
                self.cached_blocks += len(new_blocks)
                if node.lock_ref == 0 or locked_growth_evictable:
                    self.evictable_blocks += len(new_blocks)
                return node
            if child is None:
                leaf = Node(tuple(rest), list(blocks[done // self.block_size :]), parent=node, last_access=now if stamp is True else 0)
                for block in leaf.blocks:
                    self.allocator.share(block)
                node.children[self._first_block(rest)] = leaf
                self.cached_blocks += len(leaf.blocks)
                self.evictable_blocks += len(leaf.blocks)
                return leaf
            shared = self._common_blocks(child.key, rest)
            if shared * self.block_size < len(child.key):
                child = self._split(child, shared)
            if stamp:
                child.last_access = now
            node, done = child, done + shared * self.block_size
        return node

    return insert


def allocate_variant(order):
    """The reference allocate's pieces in another order (or with one left out)."""

    def allocate(self, request, num_new_tokens):
        if not self.can_allocate(request, num_new_tokens):
            raise memory.OutOfBlocksError("no room")
        short = self._blocks_short(request, num_new_tokens, []) if order == "short first" else None
        if order == "evict first":
            self.cache.evict(self._blocks_short(request, num_new_tokens, []))
        prefix, node = self._admission_blocks(request)
        if node is not None:
            if order not in ("no lock", "locked by caching"):
                self.cache.lock(node)
                if order != "lock not recorded":
                    self._locked[request.request_id] = node
            self.share_blocks(request.request_id, prefix)
            self.hit_tokens += request.num_computed_tokens
            if order == "locked by caching":  # only _cache_computed locks: the whole computed blocks
                self._cache_computed(request)
        elif order != "no caching":
            self._cache_computed(request)
        if order == "one more when tight":  # evicts one block whenever fewer than two are free
            short = self._blocks_short(request, num_new_tokens, [])
            short = max(short, 1) if self.allocator.num_free < 2 else short
        if order != "evict first":
            self.cache.evict(short if short is not None else self._blocks_short(request, num_new_tokens, []))
        PagedMemory.allocate(self, request, num_new_tokens)

    return allocate


def use_tree_blocks_variant(wrong):
    """The reference exchange of a request's duplicate blocks for the tree's, with one slip."""

    def use_tree_blocks(self, table, tokens):
        for i, block in enumerate(self.cache.match_prefix(tokens, touch=False).blocks):
            if table[i] != block:
                if wrong != "no reference taken":
                    self.allocator.share(block)
                self.allocator.free(block if wrong == "the tree's block freed" else table[i])
                if wrong != "table left on the duplicate":
                    table[i] = block

    return use_tree_blocks


def lock_moving_the_counter_every_time(self, node):
    """Takes a node's blocks out of evictable_blocks on every lock, not only on the first."""
    while node is not None:
        self.evictable_blocks -= len(node.blocks)
        node.lock_ref += 1
        node = node.parent


def unlock_moving_the_counter_every_time(self, node):
    """Gives a node's blocks back to evictable_blocks on every unlock, not only on the last."""
    if node.lock_ref - sum(child.lock_ref for child in node.children.values()) <= 0:
        raise ValueError("unlock of a node that holds no lock of its own")
    while node is not None:
        node.lock_ref -= 1
        self.evictable_blocks += len(node.blocks)
        node = node.parent


def evict_leaves_found_at_the_start_only(self, num_blocks):
    """LRU over the leaves there were when evict began: a parent left childless is not a candidate."""
    leaves = sorted((n for n in self._nodes() if n is not self.root and n.is_leaf and n.lock_ref == 0), key=lambda n: n.last_access)
    freed = 0
    for leaf in leaves:
        if freed >= num_blocks:
            break
        for block in leaf.blocks:
            self.allocator.free(block)
        freed += len(leaf.blocks)
        self.cached_blocks -= len(leaf.blocks)
        self.evictable_blocks -= len(leaf.blocks)
        del leaf.parent.children[self._first_block(leaf.key)]
    return freed


reference_insert = tree.RadixCache.insert


def insert_giving_a_new_leaf_its_parents_lock(self, tokens, blocks):
    """The reference insert, except that a leaf it hangs below a locked node starts with that node's lock count."""
    node = reference_insert(self, tokens, blocks)
    if node.parent not in (None, self.root) and node.lock_ref == 0 < node.parent.lock_ref:
        node.lock_ref = node.parent.lock_ref
        self.evictable_blocks -= len(node.blocks)
    return node


def unlock_checking_the_count_only(self, node):
    """Refuses only a count of 0: a parent whose count comes from a locked child is unlocked anyway."""
    while node is not None:
        if node.lock_ref <= 0:
            raise ValueError("unlock of a node that is not locked")
        node.lock_ref -= 1
        if node.lock_ref == 0:
            self.evictable_blocks += len(node.blocks)
        node = node.parent


PLANTS = {  # mistake: (class, attribute, wrong answer, test module, test, what the message must say)
    "3.3 parent queued at the end": (
        tree.RadixCache, "evict", evict_parents_at_the_end, "test_tree",
        "test_a_parent_that_becomes_a_leaf_competes_by_its_own_last_use", r"competes by its own last use"),
    "3.3 unlock of a parent locked from below": (
        tree.RadixCache, "unlock", unlock_checking_the_count_only, "test_tree",
        "test_unlocking_a_parent_whose_count_comes_from_a_lock_below_is_refused", r"must raise ValueError and change nothing \(a node's own locks"),
    "3.3 lock moves the counter on every lock": (
        tree.RadixCache, "lock", lock_moving_the_counter_every_time, "test_tree",
        "test_locks_survive_a_second_user_a_split_and_a_growing_leaf", r"Task 3.3: .*a second lock on a locked node must not move"),
    "3.3 unlock moves the counter on every unlock": (
        tree.RadixCache, "unlock", unlock_moving_the_counter_every_time, "test_tree",
        "test_locks_survive_a_second_user_a_split_and_a_growing_leaf", r"Task 3.3: evictable_blocks is 2 with one user still holding"),
    "3.3 a parent left childless is no candidate": (
        tree.RadixCache, "evict", evict_leaves_found_at_the_start_only, "test_tree",
        "test_evicting_a_leaf_can_make_its_parent_evictable", r"Task 3.3: evict\(3\) freed 2 .* the parent is an unlocked leaf and goes too"),
    "3.1 a new leaf inherits its parent's lock, seen by the integrity check": (
        tree.RadixCache, "insert", insert_giving_a_new_leaf_its_parents_lock, "test_tree",
        "test_insert_stamps_its_path_and_keeps_locks_through_splits_and_growth", r"Task 3.1 or 3.3: the node spelling \(.*\) \(lock_ref \d+, its children's \[.*\]\) counts fewer locks"),
    "3.1 split drops the lock": (
        tree.RadixCache, "_split", split_without_the_lock, "test_tree",
        "test_insert_stamps_its_path_and_keeps_locks_through_splits_and_growth", r"_split must carry the lock count"),
    "3.1 insert does not stamp": (
        tree.RadixCache, "insert", insert_variant(stamp=False), "test_tree",
        "test_insert_stamps_its_path_and_keeps_locks_through_splits_and_growth", r"insert stamps every node on its path"),
    "3.1 locked leaf grows evictable": (
        tree.RadixCache, "insert", insert_variant(locked_growth_evictable=True), "test_tree",
        "test_insert_stamps_its_path_and_keeps_locks_through_splits_and_growth",
        r"blocks added to a locked node's edge are locked"),
    "3.1 new leaf not stamped": (
        tree.RadixCache, "insert", insert_variant(stamp="path only"), "test_tree",
        "test_insert_stamps_its_path_and_keeps_locks_through_splits_and_growth", r"Task 3.1: inserting a new sequence"),
    "3.3 parent evicted at once": (
        tree.RadixCache, "evict", evict_variant("parent at once"), "test_tree",
        "test_a_parent_that_becomes_a_leaf_competes_by_its_own_last_use", r"Task 3.3: .* must outlive it"),
    "3.3 parent evicted at once (or up the chain), in the state machine": (
        tree.RadixCache, "evict", evict_variant("parent at once"), "test_radix_machine",
        "test_radix_state_machine", r"Task 3.3: evict\(\d+\) took .* competes by its own last use.* Steps: "),
    "3.3 largest leaf first": (
        tree.RadixCache, "evict", evict_variant("largest first"), "test_tree",
        "test_eviction_takes_least_recently_used_leaves_first", r"whatever the size of the others"),
    "3.3 largest leaf first, in the state machine (ties by id: not a hypothesis Flaky)": (
        tree.RadixCache, "evict", evict_variant("largest first"), "test_radix_machine",
        "test_radix_state_machine", r"Task 3.3: evict\(\d+\) took .* Steps: "),
    "3.3 a leaf trimmed from its tail": (
        tree.RadixCache, "evict", evict_trimming_the_tail, "test_tree",
        "test_evict_takes_a_leaf_whole_even_when_fewer_blocks_would_do", r"Task 3.3: evict\(1\) freed 1 block of the 2-block leaf .* a leaf goes whole"),
    "3.3 a leaf trimmed from its tail, in the state machine": (
        tree.RadixCache, "evict", evict_trimming_the_tail, "test_radix_machine",
        "test_radix_state_machine", r"Task 3.3: evict\(\d+\) freed \d+ of the \d+ blocks of the leaf .* all kept or all gone\. Steps: "),
    "3.4 shortfall before caching": (
        memory.RadixMemory, "allocate", allocate_variant("short first"), "test_radix_memory",
        "test_a_decode_whose_duplicate_blocks_are_given_back_evicts_nothing",
        r"caching b's blocks gives those two back, more than the one block b needs"),
    "3.4 one block evicted when the pool is nearly full": (
        memory.RadixMemory, "allocate", allocate_variant("one more when tight"), "test_radix_memory",
        "test_an_allocation_that_fits_in_free_blocks_evicts_nothing",
        r"Task 3.4: .* evicted 1 blocks although the pool had enough free"),
    "3.4 duplicate exchange: the tree's block freed": (
        memory.RadixMemory, "_use_tree_blocks", use_tree_blocks_variant("the tree's block freed"), "test_radix_memory",
        "test_a_request_that_computed_cached_tokens_again_moves_onto_the_trees_blocks", r"Task 3.4: the tree's blocks .* hold \[2, 2\] references"),
    "3.4 duplicate exchange: no reference taken": (
        memory.RadixMemory, "_use_tree_blocks", use_tree_blocks_variant("no reference taken"), "test_radix_memory",
        "test_a_request_that_computed_cached_tokens_again_moves_onto_the_trees_blocks", r"Task 3.4: the tree's blocks .* hold \[2, 2\] references"),
    "3.4 duplicate exchange: table left on the duplicate": (
        memory.RadixMemory, "_use_tree_blocks", use_tree_blocks_variant("table left on the duplicate"), "test_radix_memory",
        "test_a_request_that_computed_cached_tokens_again_moves_onto_the_trees_blocks", r"Task 3.4: b computed .* it must start on the tree's blocks"),
    "3.4 no _cache_computed": (
        memory.RadixMemory, "allocate", allocate_variant("no caching"), "test_radix_memory",
        "test_a_request_starts_after_the_cached_prefix", r"a running request's whole computed blocks are in the tree"),
    "3.4 prefix not locked": (
        memory.RadixMemory, "allocate", allocate_variant("no lock"), "test_radix_memory",
        "test_shared_prefix_workloads_reuse_and_return_every_block", r"stay locked until it is freed|must be protected"),
    "3.4 prefix locked only by _cache_computed": (
        memory.RadixMemory, "allocate", allocate_variant("locked by caching"), "test_radix_memory",
        "test_a_full_hit_keeps_its_partly_computed_last_block_locked", r"Task 3.4: an eviction between b's admission on a full hit .* left 12 of them"),
    "3.4 admission lock not recorded, seen by the integrity check": (
        memory.RadixMemory, "allocate", allocate_variant("lock not recorded"), "test_radix_memory",
        "test_shared_prefix_workloads_reuse_and_return_every_block", r"Task 3.4: the root counts \d+ locks, and \d+ requests hold one \(.*node spelling"),
    "3.4 evict before lock": (
        memory.RadixMemory, "allocate", allocate_variant("evict first"), "test_radix_memory",
        "test_shared_prefix_workloads_reuse_and_return_every_block", r"before it was protected|must be protected"),
}


def messages(error: BaseException) -> str:
    """The text of an error and, for an exception group (hypothesis's several failures), of each inside it."""
    inner = getattr(error, "exceptions", ())
    return "\n".join([str(error), *(messages(e) for e in inner)])


@pytest.mark.parametrize("mistake", list(PLANTS))
def test_a_planted_mistake_fails_its_tasks_test_with_a_message_that_names_it(mistake, monkeypatch):
    owner, attribute, wrong, test_module, test_name, message = PLANTS[mistake]
    monkeypatch.syspath_prepend(str(CH03))
    monkeypatch.syspath_prepend(str(CH03.parent / "ch01_scheduler"))
    monkeypatch.syspath_prepend(str(CH03.parent / "ch00_model"))
    tests = import_planted(CH03 / f"{test_module}.py", f"planted_tests_ch03_{test_module}")
    monkeypatch.setattr(owner, attribute, wrong)
    with pytest.raises(BaseException) as failure:
        getattr(tests, test_name)()
    text = messages(failure.value)
    assert re.search(message, text, re.S), f"the message does not name the mistake ({message!r}): {text[:2000]}"
