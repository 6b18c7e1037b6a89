"""Tasks 3.1-3.3: the radix tree, one behaviour at a time, each needing only the tasks before it."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.paged import BlockAllocator
from miniyaie.radix import RadixCache
from tree_paths import spelled


def cache_with(sequences, block_size, num_blocks=200):
    """A tree holding `sequences`, inserted like finished requests leave them (the request's refs dropped)."""
    allocator = BlockAllocator(num_blocks)
    tree = RadixCache(allocator, block_size)
    for seq in sequences:
        insert(tree, seq)
    return tree


def insert(tree, seq):
    seq = seq[: len(seq) // tree.block_size * tree.block_size]
    blocks = tree.allocator.allocate_many(len(seq) // tree.block_size)
    node = tree.insert(seq, blocks)
    for block in blocks:
        tree.allocator.free(block)  # the request is done; the tree keeps what it took
    return node


def longest_prefix(sequences, query, block_size):
    """The model: the longest block-aligned prefix of `query` that is a prefix of an inserted sequence."""
    best = 0
    for seq in sequences:
        seq = seq[: len(seq) // block_size * block_size]
        n = 0
        while n + block_size <= min(len(seq), len(query)) and seq[n : n + block_size] == query[n : n + block_size]:
            n += block_size
        best = max(best, n)
    return best


tokens = st.lists(st.integers(0, 2), max_size=14)  # a tiny vocabulary: lots of sharing and splits



@pytest.mark.task("3.2")
@given(sequences=st.lists(tokens, max_size=6), query=tokens, block_size=st.sampled_from([1, 2, 4]))
@example(sequences=[], query=[1, 2, 3], block_size=1)  # empty tree
@example(sequences=[[1, 2, 3, 4]], query=[1, 2, 3, 4], block_size=2)  # a full hit
@example(sequences=[[1, 2, 3, 4]], query=[1, 2, 3, 5], block_size=2)  # diverges inside the second block
@example(sequences=[[0, 1, 2], [0, 1, 0]], query=[0, 2], block_size=1)  # diverges inside an edge whose child starts with the next token
@example(sequences=[[1, 1, 2, 2, 3, 3]], query=[1, 1, 2, 2, 0, 0], block_size=2)  # the match ends partway along one edge
def test_match_prefix_finds_the_longest_cached_prefix(sequences, query, block_size):
    tree = cache_with(sequences, block_size)
    stamps = last_uses(tree)
    peek = tree.match_prefix(query, touch=False)
    assert last_uses(tree) == stamps, (
        "Task 3.2: match_prefix(touch=False) is a peek: it must change no node's last_access (the scheduler's "
        "prefix-length oracle must not reorder LRU eviction)"
    )
    match = tree.match_prefix(query)
    assert (peek.length, peek.blocks, peek.node) == (match.length, match.blocks, match.node), "Task 3.2: a peek finds the same match"
    node = match.node
    while node is not tree.root:
        assert node.last_access > max(stamps.values()), (
            f"Task 3.2: the node spelling {spelled(node)} on the matched path kept last_access {node.last_access}: a touching "
            "match stamps every node it passes (the partly matched one too) with a fresh next(_clock)"
        )
        node = node.parent
    expected = longest_prefix(sequences, query, block_size)
    assert match.length == expected, f"Task 3.2: matched {match.length} tokens of {query}; the tree caches {expected} of them"
    assert len(match.blocks) == match.length // block_size, "Task 3.2: one block per matched block of tokens"
    assert len(set(match.blocks)) == len(match.blocks), f"Task 3.2: the matched blocks {match.blocks} repeat a block"
    cached = cached_blocks_by_prefix(tree)
    assert match.blocks == [cached[tuple(query[:n])] for n in range(block_size, match.length + 1, block_size)], (
        "Task 3.2: the blocks are the ones holding the matched prefix, in order"
    )
    path = spelled(match.node)
    if match.length == 0:
        assert match.node is tree.root, "Task 3.2: nothing matched: the node is the root"
    else:
        assert path[: match.length] == tuple(query[: match.length]) and len(spelled(match.node.parent)) < match.length, (
            f"Task 3.2: match.node spells {path}: it must be the node whose edge holds the last matched block (when the match "
            "ends partway along an edge, that edge's node), so that locking it protects every matched block"
        )


def last_uses(tree):
    """Every node (by identity) -> its last_access, read through the public fields."""
    out, stack = {}, [tree.root]
    while stack:
        node = stack.pop()
        out[id(node)] = node.last_access
        stack.extend(node.children.values())
    return out


def unlocked_blocks(tree):
    """The blocks of the nodes no lock covers, counted by walking the tree."""
    stack, total = [tree.root], 0
    while stack:
        node = stack.pop()
        total += len(node.blocks) if node.lock_ref == 0 else 0
        stack.extend(node.children.values())
    return total


def cached_blocks_by_prefix(tree):
    """Every block-aligned prefix the tree spells from its root -> the block holding its last block of tokens.

    Reads only the paths (edge tokens and blocks), so any tree shape that caches the same
    prefixes passes; a prefix spelled twice (stored twice) fails.
    """
    found, stack = {}, [((), tree.root)]
    while stack:
        path, node = stack.pop()
        for child in node.children.values():
            assert len(child.key) == len(child.blocks) * tree.block_size, "Task 3.1: an edge holds whole blocks"
            assert child.key, "Task 3.1: no empty edge"
            for j, block in enumerate(child.blocks):
                prefix = path + tuple(child.key[: (j + 1) * tree.block_size])
                assert prefix not in found, f"Task 3.1: prefix {prefix} cached twice"
                found[prefix] = block
            stack.append((path + tuple(child.key), child))
    return found


@pytest.mark.task("3.1")
@given(sequences=st.lists(tokens, min_size=1, max_size=6), block_size=st.sampled_from([1, 2, 4]))
@example(sequences=[[1, 1, 2, 2, 3, 3], [1, 1, 2, 2, 0, 0]], block_size=2)  # two requests share, then diverge
@example(sequences=[[0, 1, 2, 0, 1, 2, 0, 1], [0, 1, 2, 0, 1, 1, 1, 1]], block_size=4)  # split in the middle of a block
@example(sequences=[[1, 1], [1, 1, 2, 2], [1, 1, 2, 2, 3, 3]], block_size=2)  # a request caching its next blocks
@example(sequences=[[1, 1, 2, 2], [1, 1]], block_size=2)  # a prefix of what is cached: nothing new
def test_insert_stores_each_shared_prefix_once(sequences, block_size):
    allocator = BlockAllocator(200)
    tree = RadixCache(allocator, block_size)
    expected = set()
    for seq in sequences:
        node = insert(tree, seq)
        aligned = tuple(seq[: len(seq) // block_size * block_size])
        assert spelled(node) == aligned, (
            f"Task 3.1: insert returned a node whose path spells {spelled(node)}; it must spell the inserted tokens {aligned} "
            "(the caller locks it to keep them)"
        )
        expected |= {tuple(seq[:n]) for n in range(block_size, len(seq) + 1, block_size)}
        cached = cached_blocks_by_prefix(tree)
        assert set(cached) == expected, "Task 3.1: the tree spells exactly the block-aligned prefixes inserted"
        assert len(set(cached.values())) == len(cached), "Task 3.1: one block per distinct cached prefix"
        assert tree.cached_blocks == len(cached) == allocator.num_used, "Task 3.1: the tree holds one reference per block"
        assert tree.evictable_blocks == tree.cached_blocks, "Task 3.1: nothing is locked"
        tree.check_integrity()


@pytest.mark.task("3.3")
@given(sequences=st.lists(tokens, min_size=1, max_size=5), pick=st.integers(0, 4), block_size=st.sampled_from([1, 2]))
def test_locked_paths_are_never_evicted(sequences, pick, block_size):
    tree = cache_with(sequences, block_size)
    seq = sequences[pick % len(sequences)]
    match = tree.match_prefix(seq)
    tree.lock(match.node)
    locked_blocks = set(tree.match_prefix(seq).blocks)
    assert tree.evictable_blocks <= tree.cached_blocks - len(locked_blocks), (
        f"Task 3.3: {tree.evictable_blocks} of {tree.cached_blocks} cached blocks counted evictable, "
        f"but {len(locked_blocks)} are on the locked path"
    )
    tree.evict(10_000)
    assert tree.match_prefix(seq).length >= match.length, "Task 3.3: a locked prefix survives any eviction"
    assert tree.cached_blocks >= len(locked_blocks), (
        f"Task 3.3: {tree.cached_blocks} blocks left after evicting everything possible; the locked path holds {len(locked_blocks)}"
    )
    tree.unlock(match.node)
    assert tree.evictable_blocks == tree.cached_blocks, "Task 3.3: with no lock left, every cached block is evictable"
    tree.evict(10_000)
    assert tree.cached_blocks == 0 and tree.allocator.num_free == tree.allocator.num_blocks, (
        f"Task 3.3: {tree.cached_blocks} blocks still cached after evicting everything with no lock held"
    )
    before = (tree.evictable_blocks, tree.root.lock_ref)
    with pytest.raises(ValueError):
        tree.unlock(match.node)  # lock counts never go negative
    assert (tree.evictable_blocks, tree.root.lock_ref) == before, "Task 3.3: a refused unlock changes nothing"


@pytest.mark.task("3.3")
def test_eviction_takes_least_recently_used_leaves_first():
    tree = cache_with([[1, 1], [2, 2], [3, 3, 3, 3]], block_size=2)
    tree.match_prefix([1, 1])  # used again: now the most recent
    free_before = tree.allocator.num_free
    freed = tree.evict(1)
    left = {seq: tree.match_prefix(list(seq), touch=False).length for seq in [(1, 1), (2, 2), (3, 3, 3, 3)]}
    assert left == {(1, 1): 2, (2, 2): 0, (3, 3, 3, 3): 4}, (
        f"Task 3.3: after [1 1], [2 2], [3 3 3 3] were cached and [1 1] used again, evict(1) left the cached lengths "
        f"{left}: evict takes the least recently used leaf, [2 2], whatever the size of the others"
    )
    assert freed == 1, f"Task 3.3: evict(1) returned {freed} after evicting the one-block leaf [2 2]"
    assert tree.allocator.num_free == free_before + 1, "Task 3.3: evicted blocks go back to the pool"


@pytest.mark.task("3.3")
def test_evict_takes_a_leaf_whole_even_when_fewer_blocks_would_do():
    tree = cache_with([[2, 2, 2, 2], [1, 1], [3, 3]], block_size=2)  # [2 2 2 2], inserted at once, is the oldest leaf
    leaf = tree.match_prefix([2, 2, 2, 2], touch=False).node
    whole, above = len(leaf.blocks), len(spelled(leaf.parent))  # 2 and 0 unless the tree cut [2 2 2 2] into two nodes
    freed = tree.evict(1)
    left = tree.match_prefix([2, 2, 2, 2], touch=False).length
    assert freed == whole and left == above, (
        f"Task 3.3: evict(1) freed {freed} block{'s' * (freed != 1)} of the {whole}-block leaf [2 2 2 2], the least "
        f"recently used, and left {left} of its tokens cached: a leaf goes whole (all its blocks), even when fewer "
        "would do, so a cached prefix is kept or evicted with the node that holds it"
    )
    assert tree.match_prefix([1, 1], touch=False).length == 2 == tree.match_prefix([3, 3], touch=False).length, (
        "Task 3.3: evict(1) took a leaf besides the least recently used [2 2 2 2], whose blocks were enough"
    )
    tree.check_integrity()


@pytest.mark.task("3.3")
def test_inserting_a_cached_sequence_again_counts_as_a_use():
    tree = cache_with([[1, 1, 2, 2], [1, 1, 3, 3], [4, 4]], block_size=2)
    insert(tree, [1, 1, 2, 2])  # a request that used [1 1 2 2] caches it again when it finishes
    freed = tree.evict(1)
    assert freed == 1, f"Task 3.3: evict(1) freed {freed} blocks with one-block leaves cached: it stops as soon as 1 is freed"
    left = {seq: tree.match_prefix(list(seq), touch=False).length for seq in [(1, 1, 2, 2), (1, 1, 3, 3), (4, 4)]}
    assert left == {(1, 1, 2, 2): 4, (1, 1, 3, 3): 2, (4, 4): 2}, (
        f"Task 3.3: after [1 1 2 2], [1 1 3 3], [4 4] were cached and [1 1 2 2] inserted again, evict(1) left the cached "
        f"lengths {left}: inserting again is a use, so the least recently used leaf is [3 3] below [1 1]"
    )


@pytest.mark.task("3.3")
def test_evicting_a_leaf_can_make_its_parent_evictable():
    tree = cache_with([[5, 5, 6, 6], [5, 5, 7, 7]], block_size=2)  # parent [5 5] with two leaves
    freed = tree.evict(3)
    assert freed == 3, (
        f"Task 3.3: evict(3) freed {freed} of the 3 cached blocks ([5 5] with leaves [6 6] and [7 7]): once both leaves "
        "are gone the parent is an unlocked leaf and goes too"
    )
    assert tree.cached_blocks == 0 and tree.match_prefix([5, 5]).length == 0, (
        f"Task 3.3: after evicting all 3 blocks, cached_blocks is {tree.cached_blocks} and [5 5] still matches "
        f"{tree.match_prefix([5, 5]).length} tokens"
    )
    assert tree.allocator.num_free == tree.allocator.num_blocks, (
        f"Task 3.3: {tree.allocator.num_blocks - tree.allocator.num_free} blocks not given back to the pool after evicting everything"
    )


@pytest.mark.task("3.3")
def test_locks_survive_a_second_user_a_split_and_a_growing_leaf():
    tree = cache_with([[1, 1, 2, 2]], block_size=2)
    node = tree.match_prefix([1, 1, 2, 2]).node
    tree.lock(node)
    tree.lock(node)  # a second request on the same prefix
    assert tree.evictable_blocks == 0 == unlocked_blocks(tree), (
        f"Task 3.3: evictable_blocks is {tree.evictable_blocks} with both cached blocks locked twice: a second lock on a "
        "locked node must not move the counter again"
    )
    tree.unlock(node)
    assert tree.evictable_blocks == 0, f"Task 3.3: evictable_blocks is {tree.evictable_blocks} with one user still holding the lock"
    insert(tree, [1, 1, 3, 3])  # splits the locked edge after [1 1]
    upper = tree.match_prefix([1, 1], touch=False).node
    assert spelled(upper) == (1, 1) and upper.lock_ref == 1, (
        f"Task 3.3: the node spelling (1, 1), which a split put in the middle of a locked path, has lock_ref {upper.lock_ref}: "
        "it must carry the lock of the path below it"
    )
    assert tree.evictable_blocks == unlocked_blocks(tree) == 1, (
        f"Task 3.3: evictable_blocks is {tree.evictable_blocks}; after the split only the new leaf (1 block) is unlocked"
    )
    insert(tree, [1, 1, 2, 2, 4, 4])  # the locked request caches its next block
    assert tree.evictable_blocks == unlocked_blocks(tree), (
        f"Task 3.3: evictable_blocks is {tree.evictable_blocks}, but the unlocked nodes hold {unlocked_blocks(tree)} blocks "
        "after inserting below a locked leaf (if its edge grew, the new block is locked too)"
    )
    tree.check_integrity()
    unlocked = unlocked_blocks(tree)
    assert tree.evict(10_000) == unlocked, f"Task 3.3: evicting everything possible frees the {unlocked} unlocked blocks"
    assert tree.match_prefix([1, 1, 2, 2]).length == 4, "Task 3.3: the locked prefix survives eviction"
    tree.unlock(node)
    assert tree.evictable_blocks == tree.cached_blocks == unlocked_blocks(tree), "Task 3.3: with no lock left, every cached block is evictable"
    tree.check_integrity()


@pytest.mark.task("3.3")
def test_unlocking_a_node_that_holds_no_lock_is_refused_while_another_path_is_locked():
    """The check is the node's own lock count: another path's lock (which the root also carries) makes no difference."""
    tree = cache_with([[1, 1], [2, 2]], block_size=2)
    locked, unlocked = tree.match_prefix([1, 1]).node, tree.match_prefix([2, 2]).node
    tree.lock(locked)
    before = (tree.evictable_blocks, locked.lock_ref, unlocked.lock_ref, tree.root.lock_ref)
    with pytest.raises(ValueError):
        tree.unlock(unlocked)
    assert (tree.evictable_blocks, locked.lock_ref, unlocked.lock_ref, tree.root.lock_ref) == before, (
        f"Task 3.3: unlocking the unlocked path [2 2] while [1 1] is locked must raise and change nothing: (evictable_blocks, "
        f"the locked node's, the unlocked node's and the root's lock counts) went from {before} to "
        f"{(tree.evictable_blocks, locked.lock_ref, unlocked.lock_ref, tree.root.lock_ref)}"
    )
    tree.check_integrity()


@pytest.mark.task("3.3")
def test_a_parent_that_becomes_a_leaf_competes_by_its_own_last_use():
    tree = cache_with([[1, 2], [1, 3], [9]], block_size=1)  # (1,) has leaves (2,) and (3,); (9,) is the newest
    assert tree.evict(3) == 3, "Task 3.3: evict(3) with 4 unlocked blocks cached must free exactly 3"
    left = {seq: tree.match_prefix(list(seq), touch=False).length for seq in [(1,), (9,)]}
    assert left == {(1,): 0, (9,): 1}, (
        f"Task 3.3: after evict(3), cached lengths of (1,) and (9,) are {left}: a parent that became a leaf competes "
        "by its own last use (the parent (1,) was last used before (9,), so it goes first), not from the end of the order"
    )
    tree = cache_with([[1, 2], [1, 3], [9]], block_size=1)
    tree.match_prefix([1])  # the parent (1,) is used again: now more recent than (9,), its leaves are not
    assert tree.evict(3) == 3, "Task 3.3: evict(3) with 4 unlocked blocks cached must free exactly 3"
    left = {seq: tree.match_prefix(list(seq), touch=False).length for seq in [(1,), (9,)]}
    assert left == {(1,): 1, (9,): 0}, (
        f"Task 3.3: after match_prefix([1]) and evict(3), cached lengths of (1,) and (9,) are {left}: a parent that "
        "became a leaf competes by its own last use, so (1,), used after (9,), must outlive it; it is not evicted at "
        "once when its last child goes"
    )


def lock_by_hand(tree, node):
    """Task 3.3's lock as a model (so that 3.1 needs no later task): one more lock on the path to the root."""
    while node is not None:
        if node.lock_ref == 0:
            tree.evictable_blocks -= len(node.blocks)
        node.lock_ref += 1
        node = node.parent


def node_spelling(tree, tokens):
    """The node whose path from the root spells exactly `tokens` (None if none does)."""
    stack = [tree.root]
    while stack:
        node = stack.pop()
        if spelled(node) == tuple(tokens):
            return node
        stack.extend(node.children.values())
    return None


def assert_path_stamped(tree, node, stamps, what):
    """Every node from `node` up to the root's child was stamped after every stamp in `stamps`."""
    while node is not tree.root:
        assert node.last_access > max(stamps.values()), (
            f"Task 3.1: {what} left the node spelling {spelled(node)} at last_access {node.last_access}, not after "
            f"the earlier uses (up to {max(stamps.values())}): insert stamps every node on its path, the one it creates "
            "or grows too, with a fresh next(_clock) (a use, for LRU)"
        )
        node = node.parent


@pytest.mark.task("3.1")
def test_insert_stamps_its_path_and_keeps_locks_through_splits_and_growth():
    tree = cache_with([[1, 1, 2, 2]], block_size=2)
    stamps = last_uses(tree)
    assert_path_stamped(tree, insert(tree, [1, 1, 2, 2]), stamps, "inserting a cached sequence again")
    stamps = last_uses(tree)
    assert_path_stamped(tree, insert(tree, [5, 5]), stamps, "inserting a new sequence [5 5]")
    stamps = last_uses(tree)
    assert_path_stamped(tree, insert(tree, [5, 5, 6, 6]), stamps, "inserting [5 5 6 6] below the cached [5 5]")
    stamps = last_uses(tree)
    assert_path_stamped(tree, insert(tree, [5, 5, 8, 8]), stamps, "inserting [5 5 8 8], which parts from [5 5 6 6]")
    lock_by_hand(tree, node_spelling(tree, [1, 1, 2, 2]))
    insert(tree, [1, 1, 3, 3])  # splits the locked edge after [1 1]
    upper = node_spelling(tree, [1, 1])
    assert upper is not None and upper.lock_ref == 1, (
        f"Task 3.1: the node spelling (1, 1), which a split put in the middle of a locked path, has lock_ref "
        f"{upper.lock_ref if upper else None}: _split must carry the lock count of the path below it to the new node"
    )
    assert tree.evictable_blocks == unlocked_blocks(tree), (
        f"Task 3.1: evictable_blocks is {tree.evictable_blocks} after splitting a locked edge; the unlocked nodes hold "
        f"{unlocked_blocks(tree)} blocks"
    )
    insert(tree, [1, 1, 2, 2, 4, 4])  # the locked request caches its next block
    assert tree.evictable_blocks == unlocked_blocks(tree), (
        f"Task 3.1: evictable_blocks is {tree.evictable_blocks} after inserting below a locked leaf, but the unlocked nodes "
        f"hold {unlocked_blocks(tree)} blocks: blocks added to a locked node's edge are locked, not evictable"
    )
    tree.check_integrity()


@pytest.mark.task("3.3")
def test_unlocking_a_parent_whose_count_comes_from_a_lock_below_is_refused():
    tree = cache_with([[1, 1, 2, 2], [1, 1, 3, 3]], block_size=2)  # (1 1) with leaves (2 2) and (3 3)
    leaf, parent = tree.match_prefix([1, 1, 2, 2]).node, tree.match_prefix([1, 1]).node
    tree.lock(leaf)
    before = (tree.evictable_blocks, leaf.lock_ref, parent.lock_ref, tree.root.lock_ref)
    try:
        tree.unlock(parent)  # its lock count is the leaf's: it holds no lock of its own
        raised = False
    except ValueError:
        raised = True
    after = (tree.evictable_blocks, leaf.lock_ref, parent.lock_ref, tree.root.lock_ref)
    assert raised and after == before, (
        f"Task 3.3: unlocking (1 1), whose only lock is the one its locked child (2 2) counts on it, must raise ValueError and "
        f"change nothing (a node's own locks are its count less its children's); it {'raised' if raised else 'returned'}"
        f" and (evictable_blocks, the leaf's, the parent's and the root's lock counts) went from {before} to {after}"
    )
    tree.unlock(leaf)
    tree.check_integrity()
