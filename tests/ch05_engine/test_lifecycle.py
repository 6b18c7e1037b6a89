"""Task 5.12: a request's life — tokens and text recorded, stop strings end it, callers told (driven by hand)."""

import pytest
from lifecycle_driver import LifecycleDriver

from miniyaie.engine import CompletionDelta, EngineConfig, GenerationOutput, LLMEngine

PROMPT = "Once upon a time there"


@pytest.fixture
def engine(tiny_loaded):
    llm = LLMEngine(tiny_loaded.model, EngineConfig(block_size=4, num_blocks=96, max_num_batched_tokens=24))
    return LifecycleDriver(llm, tiny_loaded.tokenizer, tiny_loaded.eos_token_ids)


@pytest.mark.task("5.12")
def test_a_stream_is_deltas_then_the_result(engine):
    items = list(engine.stream(PROMPT, max_tokens=7, ignore_eos=True))
    deltas, result = items[:-1], items[-1]
    assert all(isinstance(d, CompletionDelta) for d in deltas) and isinstance(result, GenerationOutput)
    assert [t for d in deltas for t in d.token_ids] == result.token_ids and len(result.token_ids) == 7
    assert "".join(d.text for d in deltas) == result.text == engine.tokenizer.decode(result.token_ids, skip_special_tokens=True)
    assert [d.finish_reason for d in deltas] == [None] * 6 + ["length"] and result.finish_reason == "length"


@pytest.mark.task("5.12")
def test_a_stop_string_ends_the_request_and_returns_its_blocks(engine):
    full = engine.generate(PROMPT, max_tokens=20, ignore_eos=True)
    candidates = [i for i in range(1, len(full.text) - 1) if "\ufffd" not in full.text[i : i + 2]]
    stop = full.text[candidates[len(candidates) // 2] :][:2]
    items = list(engine.stream(PROMPT, max_tokens=20, ignore_eos=True, stop=stop))
    result = items[-1]
    assert result.finish_reason == "stop" and items[-2].finish_reason == "stop"
    assert result.text == full.text[: full.text.find(stop)] == "".join(d.text for d in items[:-1])
    assert len(result.token_ids) < 20, "the request ended when the stop string appeared, not at max_tokens"
    engine.assert_idle()
    assert engine.llm.stats["finished_requests"] == 2, (
        f"{engine.llm.stats['finished_requests']} requests counted as finished: the one a stop string ended counts "
        "too (a finish, not an abort)")


@pytest.mark.task("5.12")
def test_every_completion_finishes_before_the_result(engine):
    items = list(engine.stream(PROMPT, n=3, max_tokens=4, temperature=1.0, seed=1, ignore_eos=True))
    result = items[-1]
    finishes = [(d.index, d.finish_reason) for d in items[:-1] if d.finish_reason]
    assert sorted(finishes) == [(0, "length"), (1, "length"), (2, "length")]
    for o in result.outputs:
        assert [t for d in items[:-1] if d.index == o.index for t in d.token_ids] == o.token_ids
    assert result.completion_tokens == 12
