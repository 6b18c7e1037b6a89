"""Chapter 2's tests name the mistakes a learner trial made (each once accepted by grading).

Each case replaces one piece of the reference paged memory with a plausible wrong answer, runs the
test of that piece's task that should catch it, and checks that it fails with a message naming the mistake.
"""

import re
from pathlib import Path

import pytest
import torch
from hypothesis import Phase, settings
from planted import import_planted

from miniyaie.model import AttentionMetadata
from miniyaie.paged import BlockAllocator, OutOfBlocksError, PagedMemory

pytestmark = pytest.mark.ungraded
CH02 = Path(__file__).resolve().parents[1] / "ch02_paged_kv_cache"


class ScanningAllocator(BlockAllocator):
    """Only a count per block: allocate takes the first block whose count is 0, num_used counts the rest."""

    def __init__(self, num_blocks, scan_allocate=True, scan_used=True):
        super().__init__(num_blocks)
        self._refs, self._used = [0] * num_blocks, 0
        self._scan_allocate, self._scan_used = scan_allocate, scan_used
        self._free_list = list(range(num_blocks - 1, -1, -1))  # for the variant whose allocate does not scan

    @property
    def num_used(self):
        return sum(1 for r in self._refs if r > 0) if self._scan_used else self._used

    @property
    def num_free(self):
        return self.num_blocks - self.num_used

    def ref_count(self, block):
        self._check(block)
        return self._refs[block]

    def allocate(self):
        if self._scan_allocate:
            for block, r in enumerate(self._refs):
                if r == 0:
                    break
            else:
                raise OutOfBlocksError("full")
        else:
            while self._free_list and self._refs[self._free_list[-1]]:
                self._free_list.pop()
            if not self._free_list:
                raise OutOfBlocksError("full")
            block = self._free_list.pop()
        self._refs[block], self._used = 1, self._used + 1
        return block

    def allocate_many(self, n):
        if n < 0:
            raise ValueError(n)
        if n > self.num_free:
            raise OutOfBlocksError(f"need {n} blocks")
        return [self.allocate() for _ in range(n)]

    def free(self, block):
        self._check(block)
        if self._refs[block] == 0:
            raise ValueError("double free")
        self._refs[block] -= 1
        if self._refs[block] == 0:
            self._used -= 1
            self._free_list.append(block)

    def share(self, block):
        self._check(block)
        if self._refs[block] == 0:
            raise ValueError("free")
        self._refs[block] += 1

    def copy_on_write(self, block):
        self._check(block)
        if self._refs[block] == 0:
            raise ValueError("free")
        if self._refs[block] == 1:
            return block
        new = self.allocate()
        self.free(block)
        return new


def copy_blocks_one_pair_at_a_time(pool, copies, block_size):
    """A loop over the pairs: a later pair reads what an earlier one wrote."""
    for src, dst in copies:
        s, d = slice(src * block_size, (src + 1) * block_size), slice(dst * block_size, (dst + 1) * block_size)
        pool.k[:, d] = pool.k[:, s]
        pool.v[:, d] = pool.v[:, s]


def copy_blocks_into_a_temporary(pool, copies, block_size):
    """`.copy_()` into an advanced-index read: it fills a temporary, and the pool does not change."""
    for src, dst in copies:
        s, d = [list(range(b * block_size, (b + 1) * block_size)) for b in (src, dst)]
        pool.k[:, d].copy_(pool.k[:, s])
        pool.v[:, d].copy_(pool.v[:, s])


def copy_blocks_indexing_from_the_cpu(pool, copies, block_size):
    """Right on every device, but its indexes are made on the CPU whatever the pool's device."""
    copies = list(copies)
    offsets = torch.arange(block_size)
    src = (torch.tensor([s for s, _ in copies])[:, None] * block_size + offsets).flatten()
    dst = (torch.tensor([d for _, d in copies])[:, None] * block_size + offsets).flatten()
    pool.k[:, dst] = pool.k[:, src]
    pool.v[:, dst] = pool.v[:, src]


def attention_metadata_on_the_cpu(tables, batch, block_size, device="cpu"):
    """Ignores `device`: the tensors are always made on the CPU."""
    width = max(len(t) for t in tables)
    slots = [t[p // block_size] * block_size + p % block_size for t, (_, start, end) in zip(tables, batch)
             for p in range(start, end)]
    return AttentionMetadata(
        query_lens=[end - start for _, start, end in batch], seq_lens=[end for _, _, end in batch],
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int64),
        block_size=block_size,
    )


class FreeStackAllocator(BlockAllocator):
    """Blocks never used come from a counter; a list holds the ones given back. Two walks of that list: allocate
    takes its lowest block (`min`), or free and share ask whether a block is free by looking for it in the list."""

    def __init__(self, num_blocks, lowest_first=True, look_up_free=False):
        super().__init__(num_blocks)
        self._refs, self._next, self._free_stack = [0] * num_blocks, 0, []
        self._lowest_first, self._look_up_free = lowest_first, look_up_free

    @property
    def num_free(self):
        return self.num_blocks - self._next + len(self._free_stack)

    @property
    def num_used(self):
        return self.num_blocks - self.num_free

    def ref_count(self, block):
        self._check(block)
        return self._refs[block]

    def _is_free(self, block):
        if self._look_up_free:
            return block >= self._next or block in self._free_stack
        return self._refs[block] == 0

    def allocate(self):
        if self._free_stack:
            if self._lowest_first:
                block = min(self._free_stack)
                self._free_stack.remove(block)
            else:
                block = self._free_stack.pop()
        elif self._next < self.num_blocks:
            block, self._next = self._next, self._next + 1
        else:
            raise OutOfBlocksError("full")
        self._refs[block] = 1
        return block

    def allocate_many(self, n):
        if n < 0:
            raise ValueError(n)
        if n > self.num_free:
            raise OutOfBlocksError(f"need {n} blocks")
        return [self.allocate() for _ in range(n)]

    def free(self, block):
        self._check(block)
        if self._is_free(block):
            raise ValueError("double free")
        self._refs[block] -= 1
        if self._refs[block] == 0:
            self._free_stack.append(block)

    def share(self, block):
        self._check(block)
        if self._is_free(block):
            raise ValueError("free")
        self._refs[block] += 1

    def copy_on_write(self, block):
        self._check(block)
        if self._is_free(block):
            raise ValueError("free")
        if self._refs[block] == 1:
            return block
        new = self.allocate()
        self.free(block)
        return new


class NegativeCountAllocator(BlockAllocator):
    """allocate_many(-1) takes nothing and returns [] (range(-1) is empty) instead of refusing the count."""

    def allocate_many(self, n):
        if n > self.num_free:
            raise OutOfBlocksError(f"need {n} blocks but only {self.num_free} are free")
        return [self.allocate() for _ in range(n)]


def share_blocks_over_a_table(self, request_id, blocks):
    """Starts the request on the blocks even when it already holds some: its first table is dropped, not freed."""
    if any(self.allocator.ref_count(block) == 0 for block in blocks):
        raise ValueError("a free block")
    for block in blocks:
        self.allocator.share(block)
    self.tables[request_id] = list(blocks)


def fork_of_anyone(self, parent_request_id, child_request_id):
    """A parent with no table gives the child an empty one."""
    self.share_blocks(child_request_id, self.tables.get(parent_request_id, []))


def allocate_chaining_copies(self, request, num_new_tokens):
    """Copies a shared block from the block itself, even when that block is still waiting for a queued copy."""
    if not self.can_allocate(request, num_new_tokens):
        raise OutOfBlocksError(f"request {request.request_id!r} cannot grow")
    start, end = request.num_computed_tokens, request.num_computed_tokens + num_new_tokens
    table = self.tables.setdefault(request.request_id, [])
    for i in self._shared_blocks_to_write(table, start, end):
        new_block = self.allocator.copy_on_write(table[i])
        self._copies.append((table[i], new_block))
        table[i] = new_block
    from miniyaie.paged.block_table import grow_block_table

    grow_block_table(table, end, self.block_size, self.allocator)


def allocate_resolving_one_level(self, request, num_new_tokens):
    """Copies a block still waiting for its copy from that copy's source, but records the new copy as copied from the
    block it replaced: a third generation (a fork of a fork of a fork, before the step) copies from a waiting block."""
    if not self.can_allocate(request, num_new_tokens):
        raise OutOfBlocksError(f"request {request.request_id!r} cannot grow")
    pending = self.__dict__.setdefault("_recorded", {})  # dst -> what it was recorded as copied from
    if not self._copies:
        pending.clear()  # the queue was taken: nothing waits any more
    start, end = request.num_computed_tokens, request.num_computed_tokens + num_new_tokens
    table = self.tables.setdefault(request.request_id, [])
    for i in self._shared_blocks_to_write(table, start, end):
        old, new_block = table[i], self.allocator.copy_on_write(table[i])
        self._copies.append((pending.get(old, old), new_block))
        pending[new_block] = old  # the mistake: the chain's source is pending.get(old, old)
        table[i] = new_block
    from miniyaie.paged.block_table import grow_block_table

    grow_block_table(table, end, self.block_size, self.allocator)


def keep_copies_a_kept_copy_reads_from(self):
    """Drops a copy into an ownerless block, unless a kept copy reads that block: then it keeps it (the chain)."""
    kept = []
    for src, dst in reversed(self._copies):
        if self.allocator.ref_count(dst) > 0 or any(s == dst for s, _ in kept):
            kept.append((src, dst))
    self._copies = kept[::-1]


def keep_every_copy(self):
    """Leaves the queue as it is: a copy still runs after its destination lost its last owner."""


def free_dropping_the_requests_copies(self, request):
    """Drops the queued copies into the freed request's blocks, whoever else still holds them."""
    table = self.tables.pop(request.request_id, [])
    for block in table:
        self.allocator.free(block)
    self._copies = [(src, dst) for src, dst in self._copies if dst not in table]


class ShareScanningAllocator(BlockAllocator):
    """share and copy_on_write check that the block is in use by listing the free blocks."""

    def _refuse_a_free_block(self, block):
        if block in [b for b in range(self.num_blocks) if self._ref_counts[b] == 0]:
            raise ValueError(f"block {block} is free")

    def share(self, block):
        self._check(block)
        self._refuse_a_free_block(block)
        self._ref_counts[block] += 1

    def copy_on_write(self, block):
        self._check(block)
        self._refuse_a_free_block(block)
        return super().copy_on_write(block)


class BatchScanningAllocator(BlockAllocator):
    """allocate_many takes the first n blocks whose count is 0, found by a scan of the pool."""

    def allocate_many(self, n):
        if n < 0:
            raise ValueError(n)
        if n > self.num_free:
            raise OutOfBlocksError(f"need {n} blocks but only {self.num_free} are free")
        ids = [b for b in range(self.num_blocks) if self._ref_counts[b] == 0][:n]  # then marks them
        taken = set(ids)
        self._free = type(self._free)(b for b in self._free if b not in taken)
        for b in ids:
            self._ref_counts[b] = 1
        return ids


def allocate_copying_before_the_growth_fits(self, request, num_new_tokens):
    """Copies the shared blocks first, then grows; a growth that fails re-raises with the request's name."""
    start, end = request.num_computed_tokens, request.num_computed_tokens + num_new_tokens
    table = self.tables.setdefault(request.request_id, [])
    pending = {dst: src for src, dst in self._copies}
    for i in self._shared_blocks_to_write(table, start, end):
        new_block = self.allocator.copy_on_write(table[i])
        self._copies.append((pending.get(table[i], table[i]), new_block))
        table[i] = new_block
    from miniyaie.paged.block_table import grow_block_table

    try:
        grow_block_table(table, end, self.block_size, self.allocator)
    except OutOfBlocksError as error:
        raise OutOfBlocksError(f"request {request.request_id!r} cannot grow") from error


def filter_nothing_at_release(self):
    """The queue is filtered when it is taken instead."""


def free_filtering_the_queue_itself(self, request):
    """Filters the queue in free, not in _after_release (which then does nothing): truncate leaves its copies."""
    for block in self.tables.pop(request.request_id, []):
        self.allocator.free(block)
    self._copies = [(s, d) for s, d in self._copies if self.allocator.ref_count(d) > 0]


def take_copies_whose_destination_is_owned(self):
    """Keeps, at take time, every copy whose destination has an owner: maybe a new one since the free."""
    copies = [(s, d) for s, d in self._copies if self.allocator.ref_count(d) > 0]
    self._copies = []
    return copies


def take_leaving_the_queue(self):
    """Hands over the queue but keeps it: the next take returns the same copies again."""
    return list(self._copies)


FAST = ("test_allocator", "WORK_BUDGET_S", 2.0)  # a walk of the pool runs out of a smaller budget just as surely
# the state machine, searching longer and reporting the first failure it finds unshrunk (the message is the same)
SEARCH = ("test_paged_memory", "MACHINE_SETTINGS", settings(max_examples=1000, stateful_step_count=50, deadline=None,
                                                             phases=[Phase.explicit, Phase.generate]))
NO_OWNER = r"writes into a block that has no owner.*rule \(1\)"
PLANTS = {  # mistake: (test module, test, params, what the message must say, [(owner, attribute, wrong answer)])
    "2.1 allocate walks the pool": (
        "test_allocator", "test_no_operation_walks_the_pool", {}, r"Task 2\.1: an operation walks the pool: allocate",
        [("test_allocator", "BlockAllocator", lambda n: ScanningAllocator(n, scan_used=False)), FAST]),
    "2.1 num_used walks the pool": (
        "test_allocator", "test_no_operation_walks_the_pool", {}, r"Task 2\.1: an operation walks the pool: (num_used|num_free|allocate_many) took",
        [("test_allocator", "BlockAllocator", lambda n: ScanningAllocator(n, scan_allocate=False)), FAST]),
    "2.1 share and copy_on_write walk the pool": (
        "test_allocator", "test_no_operation_walks_the_pool", {}, r"Task 2\.1: an operation walks the pool: (share|copy_on_write) took",
        [("test_allocator", "BlockAllocator", ShareScanningAllocator), FAST]),
    "2.1 allocate_many walks the pool": (
        "test_allocator", "test_no_operation_walks_the_pool", {}, r"Task 2\.1: an operation walks the pool: allocate_many took",
        [("test_allocator", "BlockAllocator", BatchScanningAllocator), FAST]),
    "2.1 allocate takes the lowest block of the free list": (
        "test_allocator", "test_no_operation_walks_the_pool", {}, r"Task 2\.1: an operation walks the free list: allocate",
        [("test_allocator", "BlockAllocator", FreeStackAllocator), FAST]),
    "2.1 free and share look for the block in the free list": (
        "test_allocator", "test_no_operation_walks_the_pool", {}, r"Task 2\.1: an operation walks the free list: free took",
        [("test_allocator", "BlockAllocator", lambda n: FreeStackAllocator(n, lowest_first=False, look_up_free=True)),
         FAST]),
    "2.1 allocate_many(-1) returns no block": (
        "test_allocator", "test_allocate_many_is_all_or_nothing", {},
        r"allocate_many\(-1\) must raise ValueError: a negative count is a caller's bug.*returned \[\] instead",
        [("test_allocator", "BlockAllocator", NegativeCountAllocator)]),
    "2.3 share_blocks over a table the request holds": (
        "test_sharing", "test_sharing_refuses_what_would_leak_or_make_no_sense", {},
        r"share_blocks\('r', \[\d+\]\) when 'r' already holds \[\d+\] must raise ValueError: its first table would leak",
        [(PagedMemory, "share_blocks", share_blocks_over_a_table)]),
    "2.3 fork of a parent with no blocks": (
        "test_sharing", "test_sharing_refuses_what_would_leak_or_make_no_sense", {},
        r"fork\('nobody', 'child'\) of a parent that holds no blocks must raise KeyError",
        [(PagedMemory, "fork", fork_of_anyone)]),
    "2.3 copy-on-write kept when the growth is refused": (
        "test_paged_memory", "test_a_refused_allocation_keeps_the_shared_block_it_would_have_copied", {},
        r"allocate\(B, 3\) was refused but left 0 block\(s\) free.*A refused allocation changes nothing",
        [(PagedMemory, "allocate", allocate_copying_before_the_growth_fits)]),
    "2.3 copy-on-write kept when the growth is refused (state machine)": (
        "test_paged_memory", "test_paged_memory_state_machine", {}, r"a refused allocation changes nothing, but allocate\(\w+, \d+\) was refused and changed the memory",
        [(PagedMemory, "allocate", allocate_copying_before_the_growth_fits), SEARCH]),
    "2.3 the queue filtered when taken": (
        "test_paged_memory", "test_a_block_freed_before_the_step_and_taken_again_gets_only_its_new_copy", {},
        r"writes twice into block",
        [(PagedMemory, "_after_release", filter_nothing_at_release),
         (PagedMemory, "take_block_copies", take_copies_whose_destination_is_owned)]),
    "2.3 free filters the queue, truncate does not": (
        "test_paged_memory", "test_a_truncate_before_the_step_drops_the_copy_into_the_block_it_gave_back", {},
        r"writes into a block that has no owner.*truncate\('C', 4\).*rule \(1\)",
        [(PagedMemory, "free", free_filtering_the_queue_itself), (PagedMemory, "_after_release", filter_nothing_at_release)]),
    "2.3 free filters the queue, truncate does not (state machine)": (
        "test_paged_memory", "test_paged_memory_state_machine", {}, r"writes into a block that has no owner.*after truncate",
        [(PagedMemory, "free", free_filtering_the_queue_itself), (PagedMemory, "_after_release", filter_nothing_at_release),
         SEARCH]),
    "2.3 take leaves the queue": (
        "test_paged_memory", "test_fork_shares_blocks_and_copies_the_partial_block_on_write", {"prompt_len": 10},
        r"a stale queue", [(PagedMemory, "take_block_copies", take_leaving_the_queue)]),
    "2.2 copy_blocks indexes the pool from the CPU": (
        "test_pool", "test_copy_blocks_builds_its_indexes_on_the_pools_device", {},
        r"Task 2\.2: copy_blocks indexes a pool .* not on the pool's device: aten\.index.*cpu",
        [("test_pool", "copy_blocks", copy_blocks_indexing_from_the_cpu)]),
    "2.2 attention_metadata ignores the device": (
        "test_block_table", "test_attention_metadata_puts_its_tensors_on_the_device_asked", {},
        r"Task 2\.2: attention_metadata\(\.\.\., device='meta'\) must put its tensors on .* the pool's device, but "
        r"slot_mapping is on cpu, block_tables is on cpu",
        [("test_block_table", "attention_metadata", attention_metadata_on_the_cpu)]),
    "2.2 copy_blocks one pair at a time": (
        "test_pool", "test_copy_blocks_copies_k_and_v_of_every_layer_and_nothing_else", {},
        r"every pair reads its source as it was before the call",
        [("test_pool", "copy_blocks", copy_blocks_one_pair_at_a_time)]),
    "2.2 copy_blocks copies into a temporary": (
        "test_pool", "test_copy_blocks_copies_k_and_v_of_every_layer_and_nothing_else", {},
        r"Task 2\.2: after copying .*: block \d+ still holds its old K: nothing was written into it",
        [("test_pool", "copy_blocks", copy_blocks_into_a_temporary)]),
    "2.3 a chain of copies kept through a free": (
        "test_paged_memory", "test_a_fork_before_the_step_reads_its_prompt",
        {"freed": "the parent"}, NO_OWNER,
        [(PagedMemory, "allocate", allocate_chaining_copies), (PagedMemory, "_after_release", keep_copies_a_kept_copy_reads_from),
         ("test_paged_memory", "copy_blocks", copy_blocks_one_pair_at_a_time)]),
    "2.3 a copy of a block still waiting for its copy (state machine)": (
        "test_paged_memory", "test_paged_memory_state_machine", {}, r"itself waiting for its copy",
        [(PagedMemory, "allocate", allocate_chaining_copies), SEARCH]),
    "2.3 a copy of a block still waiting for its copy": (
        "test_paged_memory", "test_a_fork_before_the_step_reads_its_prompt", {"freed": "nobody"}, r"itself waiting for its copy",
        [(PagedMemory, "allocate", allocate_chaining_copies)]),
    "2.3 a copy chain resolved one level only": (
        "test_paged_memory", "test_a_fork_before_the_step_reads_its_prompt", {"freed": "nobody"},
        r"the third generation .* instead of its prompt.*: a copy recorded from a block that is itself waiting for its copy",
        [(PagedMemory, "allocate", allocate_resolving_one_level)]),
    "2.3 a copy chain resolved one level only (state machine)": (
        "test_paged_memory", "test_paged_memory_state_machine", {},
        r"a copy recorded from a block that is itself waiting for its copy",
        [(PagedMemory, "allocate", allocate_resolving_one_level), SEARCH]),
    "2.3 keep every copy": (
        "test_paged_memory", "test_a_fork_before_the_step_reads_its_prompt",
        {"freed": "the parent"}, NO_OWNER, [(PagedMemory, "_after_release", keep_every_copy)]),
    "2.3 keep every copy (state machine)": (
        "test_paged_memory", "test_paged_memory_state_machine", {}, NO_OWNER + r"|writes twice into block|took fresh",
        [(PagedMemory, "_after_release", keep_every_copy), SEARCH]),
    "2.3 drop the freed request's copies": (
        "test_paged_memory", "test_a_queued_copy_stays_while_its_destination_has_an_owner",
        {"freed": "the child, forked again first"}, r"must stay, since 'grandchild' still owns block",
        [(PagedMemory, "free", free_dropping_the_requests_copies)]),
    "2.3 drop the freed request's copies (state machine)": (
        "test_paged_memory", "test_paged_memory_state_machine", {}, r"does not read back what it wrote",
        [(PagedMemory, "free", free_dropping_the_requests_copies), SEARCH]),
}


def messages(error: BaseException) -> str:
    """The text of an error and, for an exception group (hypothesis's several failures), of each inside it."""
    inner = getattr(error, "exceptions", ())
    return "\n".join([str(error), *(messages(e) for e in inner)])


@pytest.mark.parametrize("mistake", list(PLANTS))
def test_a_planted_mistake_fails_its_tasks_test_with_a_message_that_names_it(mistake, monkeypatch):
    test_module, test_name, params, message, wrongs = PLANTS[mistake]
    monkeypatch.syspath_prepend(str(CH02))
    monkeypatch.syspath_prepend(str(CH02.parent / "ch00_model"))
    tests = import_planted(CH02 / f"{test_module}.py", f"planted_tests_ch02_{test_module}")
    for owner, attribute, wrong in wrongs:
        monkeypatch.setattr(tests if isinstance(owner, str) else owner, attribute, wrong)
    torch.manual_seed(0)
    with pytest.raises(BaseException) as failure:
        getattr(tests, test_name)(**params)
    text = messages(failure.value)
    assert re.search(message, text, re.S), f"the message does not name the mistake ({message!r}): {text[:2000]}"
