"""Task 3.4: the prefix cache behind the scheduler's memory interface (fake model, real scheduler)."""

import pytest
from fake_model import Driver, reference_output
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.paged import OutOfBlocksError
from miniyaie.radix import RadixMemory
from miniyaie.scheduler import Request, Scheduler, SchedulerConfig


def checked(memory):
    """Wrap memory.allocate: after each call, the request's computed whole blocks are in the tree and locked."""
    allocate = memory.allocate

    def checked_allocate(request, num_new_tokens):
        admitted_on = request.num_computed_tokens if request.request_id not in memory.tables else None
        try:
            allocate(request, num_new_tokens)
        except ValueError as error:
            raise AssertionError(
                f"allocate raised ValueError({error}) for a request the scheduler admitted on a prefix that was cached "
                "when it asked: making room evicted the prefix the request starts on before it was protected"
            ) from error
        except OutOfBlocksError as error:
            raise AssertionError(
                f"allocate raised OutOfBlocksError({error}) after can_allocate said yes: making room evicted blocks "
                "the request itself was starting on (which frees none), so the prefix a request starts on must be "
                "protected from that eviction"
            ) from error
        whole = request.num_computed_tokens // memory.block_size * memory.block_size
        if whole == 0:
            return
        match = memory.cache.match_prefix(memory.tokens_of(request)[:whole], touch=False)
        what = "its cached prefix" if admitted_on else "its computed whole blocks"
        assert match.length == whole and match.blocks == memory.block_table(request.request_id)[: whole // memory.block_size], (
            f"Task 3.4: after allocate, request {request.request_id!r} has {request.num_computed_tokens} tokens computed but the "
            f"tree holds {match.length} of them in its table's blocks: a running request's whole computed blocks are in "
            "the tree"
        )
        assert match.node.lock_ref > 0, (
            f"Task 3.4: after allocate, {what} ({whole} tokens) of request {request.request_id!r} is not locked: the blocks a "
            "running request starts on and has computed stay locked until it is freed"
        )

    memory.allocate = checked_allocate
    return memory


def run(memory, prompts, max_tokens=4, budget=32, seqs=4, policy="fcfs", one_by_one=False):
    checked(memory)
    scheduler = Scheduler(SchedulerConfig(budget, seqs, policy), memory)
    driver = Driver(scheduler)
    requests = [Request(f"q{i}", list(p), max_tokens, ignore_eos=True) for i, p in enumerate(prompts)]
    for r in requests:
        driver.add(r)
        if one_by_one:
            driver.run_to_completion(max_steps=500)
    for _ in range(2000):
        if not scheduler.has_unfinished():
            break
        driver.step()
        memory.check_integrity()
    assert not scheduler.has_unfinished(), f"Task 3.4: requests still unfinished after 2000 steps: {[r.request_id for r in requests if not r.is_finished]}"
    return requests, driver


@pytest.mark.task("3.4")
@given(block_size=st.sampled_from([1, 2, 4, 16]), shared=st.integers(1, 40), suffix=st.integers(1, 9))
@example(block_size=4, shared=8, suffix=1)  # the shared part ends on a block boundary
@example(block_size=16, shared=5, suffix=3)  # less than one block shared: nothing to reuse
def test_a_request_starts_after_the_cached_prefix(block_size, shared, suffix):
    memory = RadixMemory(num_blocks=64, block_size=block_size)
    system = [(7 * i) % 11 + 1 for i in range(shared)]
    first, second = system + [20] * suffix, system + [30] * suffix
    (a, b), driver = run(memory, [first, second], one_by_one=True)
    b_first_chunk = next(c for out in driver.trace.steps for c in out.chunks if c.request is b)
    aligned = shared // block_size * block_size
    assert b_first_chunk.start == aligned, f"Task 3.4: b starts at {b_first_chunk.start}: its {aligned} cached tokens are not computed again"
    assert b.num_cached_tokens == aligned and memory.hit_tokens == aligned, (
        f"Task 3.4: hit_tokens {memory.hit_tokens}, b.num_cached_tokens {b.num_cached_tokens}: b started on {aligned} cached tokens"
    )
    for r in (a, b):
        assert r.output_token_ids == reference_output(r.prompt_token_ids, r.max_tokens), (
            f"Task 3.4: request {r.request_id!r} produced {r.output_token_ids}: its table does not hold its tokens' K/V"
        )


@pytest.mark.task("3.4")
def test_a_full_hit_still_computes_the_last_token():
    memory = RadixMemory(num_blocks=32, block_size=4)
    prompt = list(range(1, 17))  # four whole blocks
    (a, b), driver = run(memory, [prompt, prompt], one_by_one=True)
    b_chunks = [c for out in driver.trace.steps for c in out.chunks if c.request is b]
    assert (b_chunks[0].start, b_chunks[0].num_tokens) == (15, 1), "Task 3.4: all 16 tokens cached: only the last is computed"
    assert memory.hit_tokens == b.num_cached_tokens == 15, (
        f"Task 3.4: hit_tokens is {memory.hit_tokens}: a full hit of 16 tokens serves 15 from the cache, the 16th is recomputed "
        "(hit_tokens counts the num_computed_tokens a request starts with)"
    )
    assert b.output_token_ids == a.output_token_ids == reference_output(prompt, 4), (
        f"Task 3.4: the same prompt gave {a.output_token_ids}, then {b.output_token_ids} on a full hit; expected "
        f"{reference_output(prompt, 4)}"
    )


@pytest.mark.task("3.4")
def test_a_full_hit_keeps_its_partly_computed_last_block_locked():
    """Admitted on a full hit, a request starts inside the prefix's last block: that block is locked from admission too."""
    for prompt in (list(range(1, 17)), [1, 2, 3, 4]):  # blocks of 4: four whole blocks, and a prompt of one block
        memory = RadixMemory(num_blocks=32, block_size=4)
        a = Request("a", prompt, 1)
        memory.allocate(a, len(prompt))
        a.num_computed_tokens = len(prompt)
        memory.free(a)  # prompt cached whole
        b = Request("b", prompt, 4)
        b.num_computed_tokens = len(prompt) - 1  # admitted on the full hit: the last token is computed again
        memory.allocate(b, 1)
        memory.cache.evict(10**6)  # anything evictable goes before b's first step
        left = memory.cache.match_prefix(prompt, touch=False).length
        assert left == len(prompt), (
            f"Task 3.4: an eviction between b's admission on a full hit of the cached {len(prompt)}-token prompt (blocks of 4; "
            f"{len(prompt) - 1} tokens computed, the last in the prefix's last block) and its first step left {left} of them "
            "cached: the cached blocks a request starts on, the partly computed last one too, stay locked from admission "
            "until it is freed"
        )
        b.num_computed_tokens = len(prompt)
        memory.free(b)
        memory.check_integrity()


@pytest.mark.task("3.4")
@given(
    groups=st.integers(1, 3),
    per_group=st.integers(1, 4),
    block_size=st.sampled_from([1, 2, 4]),
    num_blocks=st.integers(14, 60),  # block size 1 and 14 blocks: room for exactly one request
    policy=st.sampled_from(["fcfs", "lpm"]),
)
@example(groups=2, per_group=4, block_size=2, num_blocks=14, policy="lpm")  # memory pressure: evictions
@example(groups=2, per_group=4, block_size=2, num_blocks=60, policy="fcfs")  # room to spare: later requests hit
def test_shared_prefix_workloads_reuse_and_return_every_block(groups, per_group, block_size, num_blocks, policy):
    memory = RadixMemory(num_blocks, block_size)
    prompts = [[g + 1] * 9 + [40 + q, 41 + g] for g in range(groups) for q in range(per_group)]
    requests, _ = run(memory, prompts, max_tokens=3, budget=16, seqs=3, policy=policy)
    for r in requests:
        assert r.output_token_ids == reference_output(r.prompt_token_ids, 3), (
            f"Task 3.4: request {r.request_id!r} produced {r.output_token_ids}: a block it read was not its prefix's"
        )
    if per_group > 3 and num_blocks >= 40:  # more requests in a group than seats: a later one finds the prefix
        assert memory.hit_tokens > 0, "Task 3.4: requests of a group reuse their shared prefix"
    assert memory.num_used_blocks == memory.cache.cached_blocks, (
        f"Task 3.4: {memory.num_used_blocks - memory.cache.cached_blocks} blocks still held after every request stopped"
    )
    memory.cache.reset()
    assert memory.num_free_blocks == num_blocks, f"Task 3.4: {num_blocks - memory.num_free_blocks} blocks lost after a reset"


@pytest.mark.task("3.4")
def test_lpm_admits_the_request_with_the_longest_cached_prefix():
    memory = RadixMemory(num_blocks=64, block_size=2)
    run(memory, [[5] * 12], max_tokens=1)  # leaves [5]*12 in the cache
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=100, max_num_seqs=1, policy="lpm"), memory)
    cold, warm = Request("cold", [9] * 12, 1), Request("warm", [5] * 10 + [6, 6], 1)
    scheduler.add_request(cold)
    scheduler.add_request(warm)
    (chunk,) = scheduler.schedule().chunks
    assert chunk.request is warm and chunk.start == 10, (
        f"Task 3.4: LPM admitted {chunk.request.request_id!r} at token {chunk.start}; the request 'warm' has 10 tokens "
        "cached and goes first, starting at 10"
    )


@pytest.mark.task("3.4")
def test_an_allocation_that_fits_in_free_blocks_evicts_nothing():
    """Making room evicts only the blocks that are short: cached blocks survive while the free ones suffice, to the last."""
    memory = RadixMemory(num_blocks=64, block_size=4)
    prompt = list(range(1, 17))  # four whole blocks
    run(memory, [prompt], one_by_one=True)
    cached = memory.cache.cached_blocks
    assert cached >= 4, f"Task 3.4: a finished 16-token prompt left {cached} blocks of 4 in the cache; its 4 whole blocks stay"
    run(memory, [[40 + i for i in range(5)]], one_by_one=True)  # needs a couple of blocks; dozens are free
    assert memory.cache.cached_blocks >= cached, (
        f"Task 3.4: an allocation that fit in the free blocks evicted cached ones ({cached} cached before, "
        f"{memory.cache.cached_blocks} after): evict only what the request is short of"
    )
    (again,), _ = run(memory, [prompt], one_by_one=True)
    assert again.num_cached_tokens == 15, f"Task 3.4: the cached prompt was lost: {again.num_cached_tokens} tokens hit, 15 expected"
    # A tight pool: the decode step fits exactly, in the last free block or inside the request's own last block.
    for prompt_len, free_after in ((8, 0), (9, 0)):  # blocks of 2, a pool of 8: [9 9] [8 8] [7 7] cached, 5 free
        memory = checked(RadixMemory(num_blocks=8, block_size=2))
        for token in (9, 8, 7):
            cached_request = Request(f"c{token}", [token, token], 1)
            memory.allocate(cached_request, 2)
            cached_request.num_computed_tokens = 2
            memory.free(cached_request)
        request = Request("r", [1 + i for i in range(prompt_len)], 4)
        memory.allocate(request, prompt_len)
        request.num_computed_tokens = prompt_len
        request.output_token_ids.append(0)
        free, needed = memory.num_free_blocks, 1 - prompt_len % 2  # a new block only when the last one is full
        memory.allocate(request, 1)
        evicted = [t for t in (9, 8, 7) if memory.cache.match_prefix([t, t], touch=False).length == 0]
        assert not evicted and memory.num_free_blocks == free_after, (
            f"Task 3.4: a decode after a {prompt_len}-token prompt evicted {len(evicted)} blocks although the pool had "
            f"enough free ({free} free, {needed} needed; {memory.num_free_blocks} free after): an allocation "
            "that fits in the free blocks evicts nothing, even when it takes the last one"
        )


@pytest.mark.task("3.4")
def test_a_decode_whose_duplicate_blocks_are_given_back_evicts_nothing():
    """Two requests compute the same prompt at once; caching the second's blocks gives its duplicates back to the pool."""
    memory = checked(RadixMemory(num_blocks=6, block_size=1))
    for rid, prompt in (("u9", [9]), ("u8", [8])):  # two cached leaves, [9] the older
        request = Request(rid, prompt, 1)
        memory.allocate(request, 1)
        request.num_computed_tokens = 1
        memory.free(request)
    a, b = Request("a", [1, 2], 4), Request("b", [1, 2], 4)
    for r in (a, b):  # admitted in one step on an empty path: each computes [1 2] into its own blocks
        memory.allocate(r, 2)
        r.num_computed_tokens = 2
        r.output_token_ids.append(5)
    assert memory.num_free_blocks == 0, (
        f"Task 3.4: {memory.num_free_blocks} blocks free after caching [9] and [8] and admitting a and b on [1 2] in a "
        "pool of 6: a request's allocation takes free blocks, it does not evict while they last"
    )
    memory.allocate(a, 1)  # short of one block: [9] goes
    memory.allocate(b, 1)  # b's copy of [1 2] duplicates the tree's: its two blocks come back, enough for the next
    assert memory.cache.match_prefix([8], touch=False).length == 1, (
        "Task 3.4: b's decode evicted the cached [8], though no eviction was needed: b computed [1 2] again into its "
        "own two blocks, the tree already holds [1 2], and caching b's blocks gives those two back, more than the one "
        "block b needs"
    )
    memory.check_integrity()


@pytest.mark.task("3.4")
def test_a_request_that_computed_cached_tokens_again_moves_onto_the_trees_blocks():
    """Two requests compute [1 2] at once; when the second caches it, it uses the first one's blocks and frees its own."""
    memory = RadixMemory(num_blocks=8, block_size=1)
    a, b = Request("a", [1, 2], 4), Request("b", [1, 2], 4)
    for r in (a, b):  # admitted in one step on an empty path: each computes [1 2] into its own blocks
        memory.allocate(r, 2)
        r.num_computed_tokens = 2
        r.output_token_ids.append(5)
    b_own = memory.block_table("b")[:2]
    memory.allocate(a, 1)  # a's [1 2] is cached first
    tree = memory.cache.match_prefix([1, 2], touch=False).blocks
    memory.allocate(b, 1)  # b's [1 2] duplicates the tree's
    allocator, table = memory.allocator, memory.block_table("b")
    assert table[:2] == tree, (
        f"Task 3.4: b computed [1 2] into blocks {b_own}, and the tree holds [1 2] in blocks {tree}; after b's blocks "
        f"were cached its table starts {table[:2]}: it must start on the tree's blocks (the pool keeps one copy)"
    )
    refs = [allocator.ref_count(block) for block in tree]
    assert refs == [3, 3], (
        f"Task 3.4: the tree's blocks {tree} hold {refs} references after b moved onto them: the tree, a and b hold one "
        "each (b takes its own, as a request sharing cached blocks does, and the tree's stays)"
    )
    left = [allocator.ref_count(block) for block in b_own]
    assert left == [0, 0], (
        f"Task 3.4: b's own copies of [1 2], blocks {b_own}, still hold {left} references after b moved onto the tree's: "
        "b gives its duplicates back to the pool"
    )
    for r in (a, b):
        r.num_computed_tokens = 3
        memory.free(r)
    memory.cache.reset()
    assert memory.num_free_blocks == 8, f"Task 3.4: {8 - memory.num_free_blocks} blocks lost after a, b and the cache let go"
