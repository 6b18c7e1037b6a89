"""Task 5.11: the step's counters mean what they say — the proof that the cache, the batch and preemption
are on the hot path (get_stats, the StepRecords of notebook 5, usage.cached_tokens)."""

import time

import pytest
from tiny_models import save_tiny_model

from miniyaie.engine import EngineConfig, LLMEngine, SamplingParams
from miniyaie.model import load_model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-step-counters")
    save_tiny_model("llama", path)
    return load_model(path)


@pytest.mark.task("5.11")
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


@pytest.mark.task("5.11")
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


@pytest.mark.task("5.11")
def test_step_records_add_up_to_the_counters(tiny_model):
    model = tiny_model
    engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=12, max_num_batched_tokens=8, max_num_seqs=4))
    records = []
    engine.on_step = records.append
    prompts = [[5] * 9 + [i] for i in range(4)]  # a shared prefix, chunked prefill, and a pool too small for all
    began = time.perf_counter()
    engine.generate(prompts, SamplingParams(max_tokens=6, ignore_eos=True))
    elapsed = time.perf_counter() - began
    stats = engine.stats
    assert [r.step for r in records] == list(range(1, stats["steps"] + 1))
    assert all(began <= r.started and 0 <= r.seconds <= elapsed for r in records), (
        f"a step record's time is not within the run's {elapsed:.3f} s: "
        f"{[(round(r.started - began, 3), round(r.seconds, 3)) for r in records]} (started is "
        "time.perf_counter() when the step began, seconds how long it took)")
    assert sum(r.prefill_tokens + r.decode_tokens for r in records) == stats["computed_tokens"]
    assert sum(r.sampled_tokens for r in records) == stats["output_tokens"] == 24
    assert sum(r.decode_tokens for r in records) <= 4 * 5  # a decode is one of the 5 tokens after each first one
    assert sum(r.cached_tokens for r in records) == stats["cached_tokens"] > 0
    assert sum(r.preempted for r in records) == stats["num_preemptions"]
    assert max(r.prefill_tokens + r.decode_tokens for r in records) <= 8
    assert records[-1].num_running == records[-1].num_waiting == 0


@pytest.mark.task("5.11")
def test_one_request_alone_has_exactly_its_prompt_as_prefill_and_its_other_tokens_as_decodes(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=32, enable_prefix_caching=False))
    records = []
    engine.on_step = records.append
    engine.generate([[3 + j for j in range(10)]], SamplingParams(max_tokens=6, ignore_eos=True))
    assert sum(r.prefill_tokens for r in records) == 10, "the prompt's ten tokens are the only prefill"
    assert sum(r.decode_tokens for r in records) == 5, (
        "the first token comes out of the prefill; the other five are decodes, the first of them the chunk that "
        "starts right at the end of the prompt")
    assert engine.stats["max_used_blocks"] >= 3, (
        f"max_used_blocks is {engine.stats['max_used_blocks']}: the request held at least 3 blocks of 4 at its peak")


@pytest.mark.task("5.11")
def test_a_one_token_prompt_chunk_is_prefill_not_decode(tiny_model):
    """A chunk of one token is a decode only past its prompt: a prompt's last token after a full cache hit,
    and a one-token prompt, are prefill work."""
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=64, enable_prefix_caching=True))
    prompt = [(5 * j) % 50 + 1 for j in range(8)]  # two full blocks
    engine.generate([prompt], SamplingParams(max_tokens=2, ignore_eos=True))  # leaves them in the cache
    records = []
    engine.on_step = records.append
    engine.generate([prompt, [7]], SamplingParams(max_tokens=1, ignore_eos=True))
    first = records[0]
    assert (first.prefill_tokens, first.decode_tokens) == (2, 0), (
        f"the step computed the cached prompt's last token again and a one-token prompt: 2 prefill tokens, "
        f"0 decode; the record says {first.prefill_tokens} prefill, {first.decode_tokens} decode (a decode is a "
        "one-token chunk that starts past its prompt: both conditions, not either)")
