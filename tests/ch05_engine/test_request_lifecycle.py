"""Task 5.12, the request lifecycle, at its edges: held-back text, a stop on the last token, n > 1, logprobs, cleanup.

The lifecycle is driven by hand (lifecycle_driver.py): LLMEngine steps, the
OutputProcessor turns their events into what a caller is told. A result
that never comes fails after a bounded number of steps, with a message.
"""

import gc
import weakref

import pytest
from lifecycle_driver import LifecycleDriver

from miniyaie.engine import EngineConfig, LLMEngine

PROMPT = "Once upon a time there"


@pytest.fixture
def engine(tiny_loaded):
    llm = LLMEngine(tiny_loaded.model, EngineConfig(block_size=4, num_blocks=96, max_num_batched_tokens=24))
    return LifecycleDriver(llm, tiny_loaded.tokenizer, tiny_loaded.eos_token_ids)


def run(engine, prompt=PROMPT, **kwargs):
    """The deltas and the result of one request."""
    return engine.run(prompt, **kwargs)


def assert_idle(engine):
    engine.assert_idle()


def streamed_text(deltas, index=0):
    return "".join(d.text for d in deltas if d.index == index)


def clean(text: str) -> bool:
    return "\ufffd" not in text


@pytest.mark.task("5.12")
def test_text_held_back_for_a_stop_string_comes_out_when_the_request_ends(engine):
    _, full = run(engine, max_tokens=10, ignore_eos=True)
    stop = full.text[-1:] + "\u2603\u2603"  # its first character ends the text: held back until the request ends
    assert full.text and stop not in full.text
    deltas, result = run(engine, max_tokens=10, ignore_eos=True, stop=stop)
    assert result.finish_reason == "length" and result.token_ids == full.token_ids
    assert result.text == full.text, (
        f"the result's text is {result.text!r}, expected {full.text!r}: the tail held back in case it "
        "began a stop string must be released (flushed) when the completion finishes"
    )
    assert streamed_text(deltas) == full.text, "the streamed deltas must carry the released tail too"
    assert_idle(engine)


@pytest.mark.task("5.12")
def test_a_stop_string_completed_by_the_last_allowed_token_is_a_stop(engine):
    _, full = run(engine, max_tokens=24, ignore_eos=True)
    tokenizer = engine.tokenizer
    for max_tokens in range(4, 25):
        text = tokenizer.decode(full.token_ids[:max_tokens], skip_special_tokens=True)
        before = tokenizer.decode(full.token_ids[: max_tokens - 1], skip_special_tokens=True)
        stop = text[-2:]
        if len(stop) == 2 and clean(stop) and text.find(stop) == len(text) - 2 and stop not in before:
            break
    else:
        pytest.skip("no output of this tiny model ends with a fresh two-character stop string")
    deltas, result = run(engine, max_tokens=max_tokens, ignore_eos=True, stop=stop)
    assert result.token_ids == full.token_ids[:max_tokens] and result.text == text[:-2]
    assert result.finish_reason == "stop", (
        f"the stop string {stop!r} appeared with token {max_tokens}, the last allowed: "
        f"the reason is \"stop\" (the text was cut), not {result.finish_reason!r}"
    )
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["stop"]
    assert_idle(engine)


def stop_only_in_completion_1(engine):
    """(seed, the three uncut results, a stop string only completion 1's text contains, where it starts)."""
    for seed in range(40):
        _, result = run(engine, n=3, max_tokens=12, temperature=1.0, seed=seed, ignore_eos=True)
        texts = [o.text for o in result.outputs]
        for start in range(1, len(texts[1]) - 3):
            stop = texts[1][start : start + 2]
            if clean(stop) and texts[1].find(stop) == start and stop not in texts[0] and stop not in texts[2]:
                return seed, result, stop, start
    pytest.skip("no seed gave completion 1 a text the others do not share")


@pytest.mark.task("5.12")
def test_a_stop_string_ends_only_the_completion_it_appears_in(engine):
    seed, uncut, stop, start = stop_only_in_completion_1(engine)
    deltas, result = run(engine, n=3, max_tokens=12, temperature=1.0, seed=seed, ignore_eos=True, stop=stop)
    first, second, third = result.outputs
    assert second.finish_reason == "stop" and second.text == uncut.outputs[1].text[:start], (
        f"completion 1 should stop at {stop!r}: got {second.text!r} ({second.finish_reason})"
    )
    assert len(second.token_ids) < 12, "completion 1 must stop generating when its stop string appears"
    for index, (got, want) in ((0, (first, uncut.outputs[0])), (2, (third, uncut.outputs[2]))):
        assert (got.token_ids, got.text, got.finish_reason) == (want.token_ids, want.text, "length"), (
            f"completion {index} never saw the stop string, yet it changed: each completion is ended by its "
            "own engine id, not the request's"
        )
        assert streamed_text(deltas, index) == want.text
    assert_idle(engine)


@pytest.mark.task("5.12")
@pytest.mark.parametrize("n", [1, 2])
def test_logprobs_arrive_for_every_token_in_order(engine, n):
    temperature = 0 if n == 1 else 1.0
    deltas, result = run(engine, n=n, max_tokens=6, temperature=temperature, seed=3, ignore_eos=True, logprobs=2)
    for output in result.outputs:
        assert output.logprobs is not None and len(output.logprobs) == len(output.token_ids) == 6, (
            f"completion {output.index}: {0 if output.logprobs is None else len(output.logprobs)} logprobs for "
            f"{len(output.token_ids)} tokens: record one per token when the request asks for them"
        )
        assert [entry.token_id for entry in output.logprobs] == output.token_ids, "logprobs out of token order"
        assert all(len(entry.top_logprobs) == 2 and entry.logprob <= 0 for entry in output.logprobs)
        streamed = [entry for d in deltas if d.index == output.index for entry in (d.logprobs or [])]
        assert streamed == output.logprobs, "the stream's deltas must carry the same logprobs"
    _, plain = run(engine, max_tokens=3, ignore_eos=True)
    assert plain.logprobs is None, "no logprobs were asked for"


@pytest.mark.task("5.12")
def test_a_finished_request_leaves_nothing_behind(engine):
    _, result = run(engine, max_tokens=4, ignore_eos=True)
    assert result.finish_reason == "length"
    assert_idle(engine)
    completion = weakref.ref(result.outputs[0])
    del result
    run(engine, "hello", max_tokens=2, ignore_eos=True)  # a later request: the loop's own variables move on
    gc.collect()
    assert completion() is None, (
        "the engine still holds a finished completion: forget its entries (by engine id) when it finishes"
    )


@pytest.mark.task("5.12")
def test_an_aborted_stream_ends_every_completion_and_returns_its_blocks(engine):
    seen = []
    for item in engine.stream(PROMPT, n=2, max_tokens=40, temperature=1.0, seed=1, ignore_eos=True):
        seen.append(item)
        if len(seen) == 4:
            break  # closing the stream aborts the request
    deltas, later = run(engine, "hello", max_tokens=3, ignore_eos=True)
    assert later.finish_reason == "length" and streamed_text(deltas) == later.text
    assert_idle(engine)


@pytest.mark.task("5.12")
def test_a_request_the_engine_refuses_is_not_tracked(engine):
    from miniyaie.engine import InvalidRequestError, SamplingParams
    from miniyaie.engine.request_state import RequestState

    refused = RequestState("bad", "", [], SamplingParams(n=2), sink=None, deltas=True)  # an empty prompt
    with pytest.raises(InvalidRequestError):
        engine.processor.start(refused)
    assert refused.completions == [], "the engine refused the request: it must have no completions to wait for"
    assert engine.processor.request_of("bad") is None and engine.processor.request_of("bad#1") is None
    deltas, later = run(engine, "hello", max_tokens=3, ignore_eos=True)
    assert later.finish_reason == "length" and streamed_text(deltas) == later.text
    assert_idle(engine)


@pytest.mark.task("5.12")
@pytest.mark.parametrize("n", [1, 3])
def test_the_result_reports_the_prompt_tokens_its_request_found_cached(engine, n):
    prompt = PROMPT + " was a tiny model that read its prompt twice"
    _, first = run(engine, prompt, max_tokens=2, ignore_eos=True)
    _, second = run(engine, prompt, n=n, max_tokens=2, ignore_eos=True)
    assert first.cached_tokens == 0
    assert second.cached_tokens >= 4 and second.cached_tokens < len(second.prompt_token_ids), (
        f"the second run found {second.cached_tokens} of its {len(second.prompt_token_ids)} prompt tokens cached: "
        "the request's cached_tokens comes from its token events (completion 0's)")
    assert_idle(engine)


@pytest.mark.task("5.12")
def test_a_dropped_request_gives_back_its_blocks_and_is_told_nothing(engine):
    request = engine.submit(PROMPT, n=2, max_tokens=40, temperature=1.0, seed=5, ignore_eos=True)
    for _ in range(3):
        engine.step()
    told = len(engine.told[request.request_id])
    engine.processor.drop(request)
    assert engine.processor.request_of(request.request_id) is None and engine.processor.request_of(
        request.completions[1].engine_id) is None, "a dropped request's completions are no longer tracked"
    for _ in range(3):
        engine.step()  # nothing left to run
    assert len(engine.told[request.request_id]) == told, "a dropped request's caller is told nothing more"
    assert_idle(engine)
    deltas, later = run(engine, "hello", max_tokens=3, ignore_eos=True)
    assert later.finish_reason == "length"


@pytest.mark.task("5.12")
def test_finish_ends_a_running_completion_counts_it_and_frees_its_id(engine):
    from miniyaie.engine import SamplingParams as Params

    llm = engine.llm
    rid = llm.add_request([1, 2, 3], Params(max_tokens=20, ignore_eos=True), request_id="early")
    llm.step()
    assert llm.finish(rid) is True, "the completion was running: finish ends it and says so"
    assert llm.finish(rid) is False and llm.finish("never-was") is False, "nothing to finish: False"
    assert llm.stats["finished_requests"] == 1, (
        f"finished_requests is {llm.stats['finished_requests']}: a completion ended by finish counts as finished")
    assert llm.num_request_blocks == 0, f"{llm.num_request_blocks} blocks still held after finish"
    assert llm.add_request([4], Params(max_tokens=1), request_id="early") == "early", (
        "a finished completion's id is free again (finish forgets it)")
    llm.abort("early")


@pytest.mark.task("5.12")
def test_text_held_back_inside_a_character_is_released_only_at_the_end(engine):
    """Tokens that each hold part of an emoji, fed one event at a time: no delta shows half a character,
    and the last event (finishing the completion) releases it whole."""
    from miniyaie.engine.outputs import RequestEvent

    ids = engine.tokenizer("a😀", add_special_tokens=False)["input_ids"]
    assert len(ids) >= 3, "the emoji must span several tokens for this test to mean anything"
    request = engine.submit(PROMPT, max_tokens=len(ids), ignore_eos=True)
    for i, token in enumerate(ids):
        last = i == len(ids) - 1
        engine.processor.on_event(RequestEvent(request.request_id, token, "length" if last else None))
    told = engine.told[request.request_id]
    deltas, result = told[:-1], told[-1]
    assert not any("\ufffd" in d.text for d in deltas), f"half a character was shown: {[d.text for d in deltas]}"
    assert result.text == "a😀" == "".join(d.text for d in deltas)
    engine.llm.abort(request.request_id)


@pytest.mark.task("5.12")
def test_a_completion_cut_inside_a_character_still_gets_its_held_back_text(engine):
    """max_tokens ends the completion halfway through an emoji: the detokenizer held those bytes back,
    and the finishing event must release them (as U+FFFD, as decoding the tokens at once gives)."""
    from miniyaie.engine.outputs import RequestEvent

    ids = engine.tokenizer("a😀", add_special_tokens=False)["input_ids"][:-1]  # the emoji's last token never comes
    expected = engine.tokenizer.decode(ids)
    assert len(ids) >= 2 and expected.endswith("\ufffd"), "the cut must fall inside the emoji for this test to mean anything"
    request = engine.submit(PROMPT, max_tokens=len(ids), ignore_eos=True)
    for i, token in enumerate(ids):
        engine.processor.on_event(RequestEvent(request.request_id, token, "length" if i == len(ids) - 1 else None))
    told = engine.told[request.request_id]
    deltas, result = told[:-1], told[-1]
    assert result.text == expected, (
        f"the result's text is {result.text!r}, expected {expected!r}: when an event finishes a completion, "
        "the text its detokenizer still holds back (finish()) must be added")
    assert "".join(d.text for d in deltas) == expected, "the streamed deltas must carry the released text too"
    engine.llm.abort(request.request_id)


@pytest.mark.task("5.12")
def test_an_event_carrying_an_error_raises_that_error_and_tells_nothing(engine):
    """A failed completion's event carries its error: on_event raises it (the engine's fault boundary ends
    that request alone), and no text is handed on for it."""
    from miniyaie.engine.outputs import RequestEvent

    request = engine.submit(PROMPT, max_tokens=4, ignore_eos=True)
    token = engine.tokenizer("a", add_special_tokens=False)["input_ids"][0]
    error = RuntimeError("its guide failed")
    with pytest.raises(RuntimeError) as raised:
        engine.processor.on_event(RequestEvent(request.request_id, token, None, error=error))
    assert raised.value is error, f"on_event raised {raised.value!r}, not the event's own error {error!r}"
    assert not engine.told.get(request.request_id), (
        f"an event carrying an error handed on {engine.told[request.request_id]}: raise its error instead")
    engine.llm.abort(request.request_id)
