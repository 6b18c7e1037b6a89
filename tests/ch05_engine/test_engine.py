"""Chapter 5 end to end: the whole engine refuses bad requests, aborts, samples and stops at the context.

These need every task of the chapter, so `miniyaie grade 5` shows them in its last row."""

import pytest
from tiny_models import save_tiny_model, transformers_greedy

from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import PromptTooLongError, SamplingParams, load_model

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 16)]  # end to end: the engine of Tasks 5.1-5.15
GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-qwen2")
    hf_model = save_tiny_model("qwen2", path)
    return load_model(path), hf_model


def test_bad_requests_are_refused_and_lose_nothing(tiny):
    model, hf_model = tiny
    engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=8, enable_prefix_caching=False))
    good = engine.add_request([5, 6, 7], GREEDY)
    free_before = engine.memory.num_free_blocks
    with pytest.raises(PromptTooLongError, match="context"):
        engine.add_request([1] * 200, GREEDY)  # the tiny model's context is 128
    with pytest.raises(ValueError, match="token ids"):
        engine.add_request([1, 99999], GREEDY)
    with pytest.raises(ValueError, match="needs up to"):
        engine.add_request([1] * 30, SamplingParams(max_tokens=20))  # 50 tokens, the pool holds 32
    with pytest.raises(ValueError, match="empty"):
        engine.add_request([], GREEDY)
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request([1], GREEDY, request_id=good)
    assert engine.memory.num_free_blocks == free_before
    tokens = []
    while engine.has_unfinished():
        tokens += [e.token_id for e in engine.step() if e.request_id == good]
    assert tokens == transformers_greedy(hf_model, [5, 6, 7], GREEDY.max_tokens), "the good request is unharmed"
    assert engine.num_request_blocks == 0 and engine.memory.num_free_blocks == engine.memory.num_blocks


def test_abort_mid_flight_returns_every_block(tiny):
    model, _ = tiny
    engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=32, max_num_batched_tokens=8))
    ids = [engine.add_request(list(range(1, 12)), SamplingParams(max_tokens=10)) for _ in range(3)]
    engine.step()
    engine.step()
    assert engine.abort(ids[0]) and engine.abort(ids[2])
    assert not engine.abort("no-such-request")
    while engine.has_unfinished():
        engine.step()
    assert engine.num_request_blocks == 0


def test_seeded_sampling_repeats_and_differs_across_seeds(tiny):
    model, _ = tiny
    prompt = [3, 1, 4, 1, 5]

    def sample(seed):
        engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=16))
        return engine.generate([prompt], SamplingParams(max_tokens=12, temperature=1.0, top_p=0.95, seed=seed, ignore_eos=True))[0].token_ids

    assert sample(1) == sample(1)
    assert len({tuple(sample(seed)) for seed in range(4)}) > 1


def test_generation_stops_at_the_context_length(tiny):
    model, _ = tiny
    engine = LLMEngine(model, EngineConfig(block_size=16, num_blocks=16))
    (out,) = engine.generate([[7] * 120], SamplingParams(max_tokens=50, ignore_eos=True))
    assert len(out.token_ids) == 8 and out.finish_reason == "length"  # 120 + 8 = the context of 128
