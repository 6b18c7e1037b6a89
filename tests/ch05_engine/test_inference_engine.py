"""InferenceEngine, the public API: text in and out, sync, streaming, async, abort, chat, stats, errors.

Every test runs a tiny random Llama with a byte-level tokenizer; the oracle
for greedy decoding is transformers' own generate.
"""

import asyncio
import threading

import pytest
from tiny_models import transformers_greedy

from miniyaie.engine import (
    CompletionDelta,
    EngineConfig,
    EngineError,
    GenerationOutput,
    InferenceEngine,
    InvalidRequestError,
    ModelLoadError,
    RequestFailedError,
    ResourceExhaustedError,
    SamplingParams,
)

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks
PROMPTS = ["The capital of France is", "hello", "Once upon a time there was a small engine that", "1, 2, 3,"]


@pytest.fixture
def engine(tiny_loaded):
    with InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=96, max_num_batched_tokens=24)) as e:
        yield e


def assert_no_request_holds_blocks(engine):
    stats = engine.get_stats()
    assert stats["kv_blocks"]["held_by_requests"] == 0, stats
    assert stats["requests"]["waiting"] == stats["requests"]["running"] == stats["requests"]["in_flight"] == 0


def test_batched_greedy_generate_matches_transformers_token_for_token(engine, tiny_dir):
    _, hf_model = tiny_dir
    results = engine.generate(PROMPTS, max_tokens=10, ignore_eos=True)
    assert [type(r) for r in results] == [GenerationOutput] * len(PROMPTS)
    for prompt, result in zip(PROMPTS, results):
        ids = engine.tokenizer(prompt)["input_ids"]
        assert result.prompt_token_ids == ids and result.prompt_tokens == len(ids)
        assert result.token_ids == transformers_greedy(hf_model, ids, 10)
        assert result.finish_reason == "length" and result.completion_tokens == 10
        assert result.text == engine.tokenizer.decode(result.token_ids, skip_special_tokens=True)
    assert engine.generate_text(PROMPTS[1], max_tokens=10, ignore_eos=True) == results[1].text
    assert_no_request_holds_blocks(engine)


def test_a_repeated_prompt_reports_its_cached_tokens(engine):
    prompt = "Once upon a time there was a small engine that served many requests."
    first = engine.generate(prompt, max_tokens=2)
    second = engine.generate(prompt, max_tokens=2)
    assert first.cached_tokens == 0
    # prefix caching is on by default: the prompt's whole blocks are reused (the last token is always computed)
    assert len(second.prompt_token_ids) - 4 <= second.cached_tokens < len(second.prompt_token_ids)
    assert engine.get_stats()["tokens"]["cached_prompt"] == second.cached_tokens


def test_end_of_sequence_stops_with_reason_stop(tiny_loaded):
    # make the first greedy token the end-of-sequence id: its completion is empty text, reason "stop"
    with InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=64)) as probe:
        first = probe.generate("hello", max_tokens=1, ignore_eos=True).token_ids[0]
    loaded = type(tiny_loaded)(tiny_loaded.model, tiny_loaded.tokenizer, [first], tiny_loaded.path)
    with InferenceEngine(loaded, EngineConfig(block_size=4, num_blocks=64)) as engine:
        result = engine.generate("hello", max_tokens=8)
        assert result.token_ids == [first] and result.finish_reason == "stop"
        ignoring = engine.generate("hello", max_tokens=8, ignore_eos=True)
        assert len(ignoring.token_ids) == 8 and ignoring.finish_reason == "length"


def test_stream_deltas_add_up_to_the_result(engine):
    deltas = list(engine.generate_stream(PROMPTS[0], max_tokens=12, ignore_eos=True))
    whole = engine.generate(PROMPTS[0], max_tokens=12, ignore_eos=True)
    assert "".join(deltas) == whole.text and all(deltas)
    items = list(engine.stream(PROMPTS[0], max_tokens=12, ignore_eos=True))
    assert isinstance(items[-1], GenerationOutput) and items[-1].token_ids == whole.token_ids
    assert [t for d in items[:-1] for t in d.token_ids] == whole.token_ids  # one delta per token
    assert [d.finish_reason for d in items[:-1]] == [None] * 11 + ["length"]


def test_async_generate_and_stream_run_concurrently(engine):
    async def main():
        expected = [r.text for r in engine.generate(PROMPTS, max_tokens=8, ignore_eos=True)]

        async def streamed(prompt):
            return "".join([d async for d in engine.generate_stream_async(prompt, max_tokens=8, ignore_eos=True)])

        results = await asyncio.gather(
            *(engine.generate_async(p, max_tokens=8, ignore_eos=True) for p in PROMPTS), *(streamed(p) for p in PROMPTS)
        )
        assert [r.text for r in results[: len(PROMPTS)]] == expected
        assert list(results[len(PROMPTS) :]) == expected

    asyncio.run(main())
    assert engine.get_stats()["steps"] > 0
    assert_no_request_holds_blocks(engine)


def test_abort_from_another_thread_mid_stream_returns_every_block(engine):
    items = []
    for item in engine.stream(PROMPTS[2], request_id="victim", max_tokens=60, ignore_eos=True):
        items.append(item)
        if len(items) == 3:
            thread = threading.Thread(target=engine.abort, args=("victim",))
            thread.start()
            thread.join()
    result = items[-1]
    assert isinstance(result, GenerationOutput) and result.finish_reason == "abort"
    assert 3 <= len(result.token_ids) < 60
    assert not engine.abort("victim") and not engine.abort("never-existed")
    assert_no_request_holds_blocks(engine)


def test_closing_a_stream_early_aborts_its_request(engine):
    stream = engine.generate_stream(PROMPTS[2], max_tokens=60, ignore_eos=True)
    next(stream)
    stream.close()
    assert engine.generate(PROMPTS[1], max_tokens=2).completion_tokens == 2  # a later request syncs with the loop
    assert_no_request_holds_blocks(engine)

    async def cancel():
        async for _ in engine.generate_stream_async(PROMPTS[2], max_tokens=60, ignore_eos=True):
            break  # leaving the loop closes the async generator

    asyncio.run(cancel())
    engine.generate(PROMPTS[1], max_tokens=2)
    assert_no_request_holds_blocks(engine)


def test_chat_completion_is_openai_shaped(engine):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    response = engine.chat_completion(messages, max_tokens=6, ignore_eos=True)
    assert response["object"] == "chat.completion" and response["id"].startswith("chatcmpl-")
    (choice,) = response["choices"]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length"
    prompt, ids = engine.render_chat(messages)
    assert prompt.endswith("<|im_start|>assistant\n") and "Be brief." in prompt
    expected = engine.generate(prompt, max_tokens=6, ignore_eos=True)
    assert choice["message"]["content"] == expected.text
    usage = response["usage"]
    assert usage["prompt_tokens"] == len(ids) and usage["completion_tokens"] == 6 and usage["total_tokens"] == len(ids) + 6
    assert "cached_tokens" in usage["prompt_tokens_details"]


def test_chat_stream_chunks(engine):
    messages = [{"role": "user", "content": "hello"}]
    chunks = list(engine.chat_completion_stream(messages, max_tokens=6, ignore_eos=True, include_usage=True))
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-1])
    assert text == engine.chat_completion(messages, max_tokens=6, ignore_eos=True)["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6

    async def collect():
        return [c async for c in engine.chat_completion_stream_async(messages, max_tokens=6, ignore_eos=True)]

    async_chunks = asyncio.run(collect())
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in async_chunks) == text
    assert asyncio.run(engine.chat_completion_async(messages, max_tokens=6, ignore_eos=True))["choices"][0]["message"]["content"] == text


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda e: e.generate("hi", max_tokens=0), InvalidRequestError, "max_tokens"),
        (lambda e: e.generate("hi", temperature=-1), InvalidRequestError, "temperature"),
        (lambda e: e.generate("hi", top_p=0), InvalidRequestError, "top_p"),
        (lambda e: e.generate("hi", no_such_parameter=1), InvalidRequestError, "no_such_parameter"),
        (lambda e: e.generate("", max_tokens=2), InvalidRequestError, "empty"),
        (lambda e: e.generate("word " * 200), InvalidRequestError, "context"),
        (lambda e: e.generate(["hi", 5]), InvalidRequestError, "string"),
        (lambda e: e.generate("hi", max_tokens=100, n=4), ResourceExhaustedError, "pool holds 384"),
        (lambda e: e.chat_completion([{"role": "robot", "content": "x"}]), InvalidRequestError, "role"),
        (lambda e: e.chat_completion([]), InvalidRequestError, "messages"),
    ],
)
def test_bad_requests_raise_typed_errors_and_change_nothing(engine, call, error, words):
    before = engine.get_stats()
    with pytest.raises(error, match=words):
        call(engine)
    after = engine.get_stats()
    assert after["tokens"] == before["tokens"] and after["steps"] == before["steps"]
    assert issubclass(error, EngineError) and issubclass(error, ValueError)
    assert engine.generate("hello", max_tokens=3).completion_tokens == 3  # the engine still serves


def test_a_failing_step_fails_its_requests_and_the_engine_lives_on(engine, monkeypatch):
    original = engine.llm.runner.run

    def broken(*args, **kwargs):
        raise RuntimeError("simulated device error")

    monkeypatch.setattr(engine.llm.runner, "run", broken)
    with pytest.raises(RequestFailedError, match="simulated device error"):
        engine.generate(PROMPTS, max_tokens=4)
    monkeypatch.setattr(engine.llm.runner, "run", original)
    assert engine.get_stats()["failed_steps"] == 1
    assert_no_request_holds_blocks(engine)
    assert engine.generate("hello", max_tokens=3).completion_tokens == 3


def test_get_stats_counts_what_happened(engine):
    engine.generate(PROMPTS, max_tokens=5, ignore_eos=True)
    stats = engine.get_stats()
    prompt_tokens = sum(len(engine.tokenizer(p)["input_ids"]) for p in PROMPTS)
    assert stats["requests"]["finished"] == len(PROMPTS)
    assert stats["tokens"]["prompt"] == prompt_tokens and stats["tokens"]["output"] == 5 * len(PROMPTS)
    assert stats["kv_blocks"]["total"] == 96 and stats["kv_blocks"]["max_used"] > 0
    assert stats["steps"] >= 5 and stats["output_tokens_per_second"] > 0
    assert 0 <= stats["prefix_cache_hit_rate"] <= 1


def test_closed_engine_refuses_work(tiny_loaded):
    engine = InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=16))
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.generate("hello", max_tokens=2)


def test_sampling_params_object_and_keyword_overrides(engine):
    params = SamplingParams(max_tokens=5, temperature=0.8, seed=7, ignore_eos=True)
    a = engine.generate("hello", params)
    b = engine.generate("hello", params, max_tokens=3)
    assert len(a.token_ids) == 5 and b.token_ids == a.token_ids[:3]
    assert isinstance(next(iter(engine.stream("hello", params))), CompletionDelta)


@pytest.mark.ungraded
def test_a_missing_model_is_a_model_load_error(tmp_path):
    from miniyaie.model import ModelLoadError as ChapterZeroModelLoadError

    with pytest.raises(ModelLoadError, match="does not exist") as info:
        InferenceEngine(str(tmp_path / "nowhere"))
    assert isinstance(info.value, EngineError) and isinstance(info.value, ChapterZeroModelLoadError)
