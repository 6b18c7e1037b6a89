"""Chapter 11 end to end: the prefix cache knows adapters. The same tokens under two adapters are different K/V,
so a cache hit never crosses adapters (nor between an adapter and the base model), and a hit under the same
adapter still counts."""

from __future__ import annotations

import pytest
from engine_driver import make_engine, oracle, random_prompts, run

pytestmark = [pytest.mark.task(f"11.{n}") for n in range(1, 6)]  # end to end, but for own marks

BLOCK, MAX_TOKENS = 4, 6


def test_a_cache_hit_never_crosses_adapters(lora_setup):
    engine = make_engine(lora_setup, ["all-r8", "attn-r3"], enable_prefix_caching=True, block_size=BLOCK)
    prompt = random_prompts([18], seed=5)[0]
    whole_blocks = (len(prompt) - 1) // BLOCK * BLOCK  # a hit always leaves the last prompt token to compute
    expected = [("all-r8", 0), ("attn-r3", 0), ("all-r8", whole_blocks), (None, 0), ("attn-r3", whole_blocks), (None, whole_blocks)]
    for turn, (adapter, hit) in enumerate(expected):
        before = engine.stats["cached_tokens"]
        ids, tokens, _, _, errors = run(engine, [(prompt, adapter, 1)], MAX_TOKENS)
        cached = engine.stats["cached_tokens"] - before
        who = adapter or "the base model"
        assert not errors
        assert cached == hit, (f"turn {turn}, the prompt under {who} after {[a for a, _ in expected[:turn]]}: "
                               f"{cached} prompt tokens came from the cache, expected {hit}")
        assert tokens[ids[0]] == oracle(lora_setup, adapter, prompt, MAX_TOKENS), f"turn {turn} under {who}: wrong tokens"
    engine.memory.check_integrity()


def test_requests_of_two_adapters_sharing_a_prompt_at_once_each_get_their_own(lora_setup):
    engine = make_engine(lora_setup, ["qv-r2", "o-down-r1"], enable_prefix_caching=True, block_size=BLOCK)
    prompt = random_prompts([14], seed=6)[0]
    requests = [(prompt, "qv-r2", 1), (prompt, "o-down-r1", 2), (prompt, None, 1), (prompt, "qv-r2", 1)]
    ids, tokens, _, _, errors = run(engine, requests, MAX_TOKENS)
    assert not errors
    for rid, (_, adapter, _) in zip(ids, requests):
        assert tokens[rid] == oracle(lora_setup, adapter, prompt, MAX_TOKENS), f"{rid} under {adapter or 'no adapter'}"
    assert tokens[f"{ids[1]}#1"] == tokens[ids[1]], "the forked completion runs under its request's adapter"
    assert engine.stats["request_blocks"] == 0
    engine.memory.check_integrity()
