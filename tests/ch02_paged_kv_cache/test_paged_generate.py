"""Chapter 2 end to end: the model runs on the paged pool, greedy output equal to transformers.

Several requests share a pool too small to hold them all at once, so
requests wait, finish, and hand their blocks to the next ones. Block sizes
1, 7 (odd: blocks never line up with anything) and 16. The first test drives
the pool with a minimal loop written here (PagedMemory, make_pool and the
model, nothing else); the second runs the same workload through the engine
of chapter 5, whose memory is this chapter's PagedMemory.
"""

from collections import deque

import pytest
import torch
from tiny_models import save_tiny_model, transformers_greedy

from miniyaie.model import SamplingParams, load_model
from miniyaie.paged import PagedMemory, blocks_needed, copy_blocks, make_pool
from miniyaie.scheduler import Request

pytestmark = [pytest.mark.task(f"2.{n}") for n in range(1, 4)]

MAX_TOKENS = 12
PROMPT_LENS = (1, 5, 7, 16, 23, 30)
# pools far smaller than the 154 / 23 / 13 blocks all six requests need together
POOLS = [(1, 48), (7, 8), (16, 4)]  # (block size, number of blocks)




@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny-llama")
    hf_model = save_tiny_model("llama", directory)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 320, (n,), generator=g).tolist() for n in PROMPT_LENS]
    expected = [transformers_greedy(hf_model, p, MAX_TOKENS) for p in prompts]
    return load_model(directory), hf_model, prompts, expected


def run_step(model, memory: PagedMemory, pool, requests: list[Request]) -> list[int]:
    """One forward over every request's tokens not yet in the cache; the greedy next token of each."""
    batch = []
    for r in requests:
        memory.allocate(r, r.num_tokens - r.num_computed_tokens)
        batch.append((r.request_id, r.num_computed_tokens, r.num_tokens))
    copy_blocks(pool, memory.take_block_copies(), memory.block_size)  # copy-on-write, before anything is written
    input_ids = torch.tensor([t for r in requests for t in r.all_token_ids[r.num_computed_tokens :]])
    positions = torch.tensor([p for _, start, end in batch for p in range(start, end)])
    meta = memory.attention_metadata(batch)
    hidden = model(input_ids, positions, pool, meta)
    last_rows = torch.tensor(meta.query_lens).cumsum(0) - 1
    for r in requests:
        r.num_computed_tokens = r.num_tokens
    return model.compute_logits(hidden[last_rows]).argmax(dim=-1).tolist()


def paged_greedy(model, prompts, max_tokens: int, block_size: int, num_blocks: int):
    """Greedy generation on one shared paged pool; a request waits until every admitted one can reach its full length.

    Returns the outputs in prompt order, every request that ever held each block, and the most requests run at once.
    """
    memory = PagedMemory(num_blocks, block_size)
    pool = make_pool(model.config, num_blocks, block_size, torch.float32)
    requests = [Request(f"req-{i}", list(p), max_tokens) for i, p in enumerate(prompts)]
    waiting, running = deque(requests), []
    holders: dict[int, set[str]] = {}  # block -> every request that ever held it
    most_running = 0
    while waiting or running:
        while waiting and sum(blocks_needed(r.max_total_tokens, block_size) for r in [*running, waiting[0]]) <= num_blocks:
            running.append(waiting.popleft())
        next_tokens = run_step(model, memory, pool, running)
        most_running = max(most_running, len(running))
        for r, token in zip(list(running), next_tokens):
            for block in memory.block_table(r.request_id):
                holders.setdefault(block, set()).add(r.request_id)
            r.output_token_ids.append(token)
            if len(r.output_token_ids) == r.max_tokens:
                memory.free(r)
                running.remove(r)
    assert memory.num_used_blocks == 0 and memory.num_free_blocks == num_blocks  # everything came back
    return [r.output_token_ids for r in requests], holders, most_running


@pytest.mark.parametrize("block_size,num_blocks", POOLS)
def test_greedy_on_the_paged_pool_matches_transformers(tiny, block_size, num_blocks):
    model, _, prompts, expected = tiny
    assert sum(blocks_needed(len(p) + MAX_TOKENS, block_size) for p in prompts) > num_blocks
    outputs, holders, most_running = paged_greedy(model, prompts, MAX_TOKENS, block_size, num_blocks)
    assert most_running >= 2, "Task 2.3: several requests share the pool at once"
    assert any(len(owners) >= 2 for owners in holders.values()), "Task 2.3: freed blocks are reused by later requests"
    for prompt, output, reference in zip(prompts, outputs, expected):
        assert output == reference, f"Task 2.3: prompt of {len(prompt)} tokens"


@pytest.mark.parametrize("block_size", [1, 7, 16])
def test_forked_requests_share_the_prompt_and_decode_like_separate_requests(tiny, block_size):
    """Parallel sampling: a child forked after the prefill shares the prompt's blocks, then diverges."""
    model, hf_model, prompts, expected = tiny
    prompt = prompts[4]  # 23 tokens: the last block is partly filled for block sizes 7 and 16
    memory = PagedMemory(12 if block_size > 1 else 60, block_size)
    pool = make_pool(model.config, memory.num_blocks, block_size, torch.float32)
    parent = Request("parent", list(prompt), MAX_TOKENS)
    parent.output_token_ids += run_step(model, memory, pool, [parent])  # the prefill
    used = memory.num_used_blocks
    child = Request("child", list(prompt), MAX_TOKENS)
    child.num_computed_tokens = parent.num_computed_tokens
    forced = (parent.output_token_ids[0] + 1) % 320  # the child samples another first token
    child.output_token_ids.append(forced)
    memory.fork("parent", "child")
    assert memory.num_used_blocks == used  # nothing copied yet
    for _ in range(MAX_TOKENS - 1):
        for r, token in zip([parent, child], run_step(model, memory, pool, [parent, child])):
            r.output_token_ids.append(token)
    assert parent.output_token_ids == expected[4]
    assert child.output_token_ids[1:] == transformers_greedy(hf_model, prompt + [forced], MAX_TOKENS - 1)
    full = len(prompt) // block_size  # the prompt's full blocks stay shared to the end
    assert memory.block_table("child")[:full] == memory.block_table("parent")[:full]
    assert memory.num_used_blocks == 2 * blocks_needed(len(prompt) + MAX_TOKENS - 1, block_size) - full


@pytest.mark.parametrize("block_size,num_blocks", POOLS)
def test_engine_on_the_paged_pool_matches_transformers(tiny, block_size, num_blocks):
    from miniyaie.engine import EngineConfig, LLMEngine

    model, _, prompts, expected = tiny
    engine = LLMEngine(
        model, EngineConfig(block_size=block_size, num_blocks=num_blocks, max_num_batched_tokens=256, max_num_seqs=8,
                             enable_prefix_caching=False)
    )
    memory = engine.memory
    assert isinstance(memory, PagedMemory) and memory.capacity_tokens == block_size * num_blocks
    holders: dict[int, set[str]] = {}
    most_holding = 0
    allocate = memory.allocate

    def watched_allocate(request, num_new_tokens):  # the scheduler's calls, observed
        nonlocal most_holding
        allocate(request, num_new_tokens)
        for block in memory.block_table(request.request_id):
            holders.setdefault(block, set()).add(request.request_id)
        most_holding = max(most_holding, sum(1 for rid in {r for o in holders.values() for r in o} if memory.block_table(rid)))

    memory.allocate = watched_allocate
    outputs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    for prompt, generation, reference in zip(prompts, outputs, expected):
        assert generation.token_ids == reference, f"Task 2.3: prompt of {len(prompt)} tokens"
        assert generation.finish_reason == "length"
    assert memory.num_used_blocks == 0  # every block came back
    assert most_holding >= 2, "Task 2.3: several requests share the pool at once"
    assert any(len(owners) >= 2 for owners in holders.values()), "Task 2.3: freed blocks are reused by later requests"
