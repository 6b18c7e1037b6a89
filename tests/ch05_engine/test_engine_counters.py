"""Counters a user reads (get_stats, usage.cached_tokens) mean what they say after preemption and stop strings."""

import pytest
from tiny_models import save_tiny_model

from miniyaie.engine import EngineConfig, InferenceEngine, LLMEngine, SamplingParams
from miniyaie.model import load_model

pytestmark = pytest.mark.ungraded


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-counters")
    save_tiny_model("llama", path)
    return load_model(path)


def test_cached_tokens_never_exceed_the_prompt_even_after_preemption(tiny_model):
    # a pool too small for all eight: requests are preempted, and when they come back they find
    # their own earlier prompt and output in the cache; that is not a prefix-cache hit of the prompt
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=40, max_num_batched_tokens=64,
                                                max_num_seqs=8, enable_prefix_caching=True, decode_reserve=0.0))
    params = SamplingParams(max_tokens=60, ignore_eos=True)
    prompts = {engine.add_request([(i * 7 + j) % 50 + 1 for j in range(10)], params): 10 for i in range(8)}
    reported = {}
    while engine.has_unfinished():
        for event in engine.step():
            reported[event.request_id] = event.cached_tokens
    assert engine.stats["resumed_cached_tokens"] > 0, "the workload was meant to resume preempted requests from the cache"
    for rid, cached in reported.items():
        assert 0 <= cached < prompts[rid], f"{rid}: {cached} cached tokens reported for a {prompts[rid]}-token prompt"
    assert sum(reported.values()) == engine.stats["cached_tokens"], "events and the engine's counter disagree"


def test_requests_ended_by_a_stop_string_count_as_finished(tiny_model, tiny_loaded):
    with InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=64)) as engine:
        free = engine.generate("hello", max_tokens=12, ignore_eos=True)
        assert len(free.text) >= 4, "the tiny model should produce a few characters"
        stop = free.text[2:4]
        stopped = engine.generate("hello", max_tokens=12, ignore_eos=True, stop=[stop])
        assert stopped.finish_reason == "stop"
        stats = engine.get_stats()
        assert stats["requests"]["finished"] == 2, f"finished {stats['requests']['finished']}, expected both requests"
        assert stats["requests"]["in_flight"] == 0 and stats["kv_blocks"]["held_by_requests"] == 0


def test_every_completion_of_a_request_reports_its_prompts_cache_hit(tiny_model):
    """n > 1: the completions share one prompt, so they share its prefix-cache hit (even when forked in its first step)."""
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=64, enable_prefix_caching=True))
    prefix = [(7 * j) % 50 + 1 for j in range(12)]
    engine.generate([prefix + [3]], SamplingParams(max_tokens=2, ignore_eos=True))  # leaves the prefix in the cache
    rid = engine.add_request(prefix + [9, 4], SamplingParams(n=3, max_tokens=3, ignore_eos=True))
    reported = {}
    while engine.has_unfinished():
        for event in engine.step():
            reported.setdefault(event.request_id, set()).add(event.cached_tokens)
    assert reported[rid] == {12}, f"the request reported {reported[rid]} cached prompt tokens; its 12-token prefix was cached"
    for child in (f"{rid}#1", f"{rid}#2"):
        assert reported[child] == {12}, f"completion {child} reported {reported[child]}; it shares its request's prompt"
