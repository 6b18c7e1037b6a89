"""The engine really uses the prefix cache: counters prove the suffix-only computation,
and greedy output stays equal to transformers (end to end: every chapter 3 task)."""

import pytest
import torch
from tiny_models import save_tiny_model, transformers_greedy

from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import SamplingParams, load_model

pytestmark = [pytest.mark.task(f"3.{n}") for n in range(1, 5)]
GREEDY = SamplingParams(max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    hf_model = save_tiny_model("llama", path)
    return load_model(path), hf_model


def random_tokens(n, seed):
    return torch.randint(0, 320, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def prefix_then_suffix(tiny, caching):
    """Run a prompt, then one sharing its first 40 tokens; (computed, cached, output) of the second."""
    model, _ = tiny
    system = random_tokens(40, 0)
    first, second = system + random_tokens(5, 1), system + random_tokens(9, 2)
    engine = LLMEngine(model, EngineConfig(block_size=16, num_blocks=32, enable_prefix_caching=caching))
    engine.generate([first], GREEDY)
    before = dict(engine.stats)
    (out,) = engine.generate([second], GREEDY)
    computed = engine.stats["computed_tokens"] - before["computed_tokens"]
    cached = engine.stats["cached_tokens"] - before["cached_tokens"]
    return second, computed, cached, out


def test_a_cached_prefix_computes_only_the_suffix(tiny):
    second, computed, cached, out = prefix_then_suffix(tiny, caching=True)
    assert cached == 32, "Tasks 3.1-3.4: the 40 shared tokens hold two whole blocks of 16"
    assert computed == len(second) - 32 + GREEDY.max_tokens - 1, (
        f"Tasks 3.1-3.4: {computed} tokens computed for a {len(second)}-token prompt starting on 32 cached tokens and "
        f"{GREEDY.max_tokens} output tokens: only the suffix and the decodes go through the model"
    )
    assert out.token_ids == transformers_greedy(tiny[1], second, GREEDY.max_tokens), (
        "Tasks 3.1-3.4: greedy output on a cached prefix differs from transformers': the request started on blocks "
        "that do not hold its prefix's K/V"
    )


@pytest.mark.ungraded  # the control: no chapter 3 code runs without the cache
def test_without_the_cache_every_token_is_computed(tiny):
    second, computed, cached, out = prefix_then_suffix(tiny, caching=False)
    assert cached == 0 and computed == len(second) + GREEDY.max_tokens - 1, (
        f"the control: with the cache off, {cached} tokens came from a cache and {computed} were computed"
    )
    assert out.token_ids == transformers_greedy(tiny[1], second, GREEDY.max_tokens), "the control: output differs from transformers'"


def test_a_full_prompt_hit_computes_one_token(tiny):
    model, hf_model = tiny
    prompt = random_tokens(32, 3)  # exactly two blocks of 16
    engine = LLMEngine(model, EngineConfig(block_size=16, num_blocks=16, enable_prefix_caching=True))
    first = engine.generate([prompt], GREEDY)[0]
    before = engine.stats["computed_tokens"]
    again = engine.generate([prompt], GREEDY)[0]
    assert engine.stats["computed_tokens"] - before == 1 + GREEDY.max_tokens - 1, "Tasks 3.1-3.4: only the last prompt token is recomputed"
    assert again.token_ids == first.token_ids == transformers_greedy(hf_model, prompt, GREEDY.max_tokens), (
        "Tasks 3.1-3.4: the output of a prompt run again on a full cache hit differs from its first run or from transformers'"
    )


@pytest.mark.parametrize("block_size,num_blocks,policy", [(1, 120, "lpm"), (4, 30, "fcfs"), (16, 8, "lpm")])
def test_shared_prefix_batches_match_transformers_under_eviction(tiny, block_size, num_blocks, policy):
    model, hf_model = tiny
    systems = [random_tokens(24, 10), random_tokens(20, 11)]
    prompts = [systems[i % 2] + random_tokens(3 + i, 20 + i) for i in range(6)]
    engine = LLMEngine(
        model,
        EngineConfig(block_size=block_size, num_blocks=num_blocks, max_num_batched_tokens=40, max_num_seqs=3,
                     policy=policy, enable_prefix_caching=True),
    )
    outputs = engine.generate(prompts, GREEDY)
    for prompt, out in zip(prompts, outputs):
        assert out.token_ids == transformers_greedy(hf_model, prompt, GREEDY.max_tokens), (
            f"Tasks 3.1-3.4: greedy output differs from transformers' for prompt {prompts.index(prompt)} "
            f"(block_size {block_size}, {num_blocks} blocks, {policy}): a cached or evicted block held the wrong K/V"
        )
    assert engine.stats["cached_tokens"] > 0, "Tasks 3.1-3.4: later requests of a group hit the cache"
    engine.memory.check_integrity()
    assert engine.memory.num_used_blocks == engine.memory.cache.cached_blocks, "Tasks 3.1-3.4: all blocks not cached came back"
