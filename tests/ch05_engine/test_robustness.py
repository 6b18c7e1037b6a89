"""A fault in one request fails that request alone; the engine loop lives on, or says plainly that it died.

Faults are injected through the engine's public parts: the detokenizer and
the stop-string filter classes (made to raise for requests that ask for
something no other request asks for), LLMEngine's per-step hook
`on_step`, and `engine.llm`. Every other request must finish with the
text it has without any fault, and every KV block must come back.
"""

import asyncio

import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from miniyaie.engine import (
    EngineConfig,
    EngineError,
    GenerationOutput,
    InferenceEngine,
    InvalidRequestError,
    LLMEngine,
    RequestFailedError,
    SamplingParams,
)
from miniyaie.engine.detokenizer import IncrementalDetokenizer
from miniyaie.engine.stop_strings import StopStringFilter

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks
PROMPTS = ["The capital of France is", "hello", "Once upon a time there was a small engine that", "1, 2, 3,"]
MAX_TOKENS = 12
VICTIM_STOP = "\x00no text has this"  # a stop string that marks a request whose stop-string filter raises


@pytest.fixture(scope="module")
def engine(tiny_loaded):
    with InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=128, max_num_batched_tokens=24)) as e:
        yield e


@pytest.fixture(scope="module")
def expected(engine):
    """Each prompt's greedy tokens without any fault."""
    return {p: r.token_ids for p, r in zip(PROMPTS, engine.generate(PROMPTS, max_tokens=MAX_TOKENS, ignore_eos=True))}


def inject_faults(monkeypatch):
    """A detokenizer that raises when it finishes (requests with skip_special_tokens=False) and a stop-string
    filter that raises on its first text (requests with VICTIM_STOP); every other request is untouched."""
    finish, push = IncrementalDetokenizer.finish, StopStringFilter.push

    def failing_finish(self):
        if not self.skip_special_tokens:
            raise RuntimeError("injected: the detokenizer failed")
        return finish(self)

    def failing_push(self, delta):
        if VICTIM_STOP in self.stops:
            raise RuntimeError("injected: the stop-string filter failed")
        return push(self, delta)

    monkeypatch.setattr(IncrementalDetokenizer, "finish", failing_finish)
    monkeypatch.setattr(StopStringFilter, "push", failing_push)


def assert_idle_and_serving(engine, expected):
    stats = engine.get_stats()
    assert stats["kv_blocks"]["held_by_requests"] == 0, stats
    assert stats["requests"]["in_flight"] == stats["requests"]["running"] == stats["requests"]["waiting"] == 0, stats
    assert stats["loop_alive"] and stats["loop_error"] is None
    assert engine.generate(PROMPTS[1], max_tokens=3, ignore_eos=True).token_ids == expected[PROMPTS[1]][:3]


def drive(engine, streams, abort_after):
    """Read the streams round-robin (each `next` waits for that request's next item); abort a request once
    it has `abort_after[id]` deltas. Returns each request's GenerationOutput or the exception its stream raised."""
    outcome, counts = {}, dict.fromkeys(streams, 0)
    while len(outcome) < len(streams):
        for rid, stream in streams.items():
            if rid in outcome:
                continue
            try:
                item = next(stream)
            except Exception as exc:
                outcome[rid] = exc
                continue
            if isinstance(item, GenerationOutput):
                outcome[rid] = item
                continue
            counts[rid] += 1
            if counts[rid] == abort_after.get(rid):
                engine.abort(rid)
    return outcome

FAULTS = ["none", "abort", "detokenizer", "abort with a failing detokenizer", "stop-string filter"]
request_specs = st.lists(
    st.tuples(st.sampled_from(PROMPTS), st.integers(1, MAX_TOKENS), st.sampled_from(FAULTS), st.integers(1, 4)),
    min_size=1, max_size=5,
)


@given(specs=request_specs)
@example(specs=[(PROMPTS[2], 12, "detokenizer", 1), (PROMPTS[0], 12, "none", 1)])
@example(specs=[(PROMPTS[2], 12, "abort with a failing detokenizer", 2), (PROMPTS[0], 12, "none", 1)])
@example(specs=[(PROMPTS[2], 12, "stop-string filter", 1), (PROMPTS[2], 12, "none", 1), (PROMPTS[3], 5, "abort", 2)])
@example(specs=[(PROMPTS[0], 1, "detokenizer", 1)])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_fault_in_one_request_fails_it_alone_and_the_rest_finish_unchanged(engine, expected, specs):
    failed_before = engine.get_stats()["requests"]["failed"]
    with pytest.MonkeyPatch.context() as monkeypatch:
        inject_faults(monkeypatch)
        streams, abort_after = {}, {}
        for i, (prompt, max_tokens, fault, after) in enumerate(specs):
            rid = f"r{i}"
            params = dict(max_tokens=max_tokens, ignore_eos=True)
            if fault in ("detokenizer", "abort with a failing detokenizer"):
                params["skip_special_tokens"] = False
            if fault == "stop-string filter":
                params["stop"] = [VICTIM_STOP]
            if fault.startswith("abort"):
                abort_after[rid] = after
            streams[rid] = engine.stream(prompt, request_id=rid, **params)
        outcome = drive(engine, streams, abort_after)
    for i, (prompt, max_tokens, fault, _) in enumerate(specs):
        result, want = outcome[f"r{i}"], expected[prompt][:max_tokens]
        if fault in ("none", "abort"):
            assert isinstance(result, GenerationOutput), f"request r{i} ({fault}) failed: {result!r}"
            assert result.text == engine.tokenizer.decode(result.token_ids, skip_special_tokens=True)
            if fault == "none" or result.finish_reason == "length":
                assert result.token_ids == want and result.finish_reason == "length"
            else:
                assert result.finish_reason == "abort" and result.token_ids == want[: len(result.token_ids)]
        else:
            assert isinstance(result, RequestFailedError) and "injected" in str(result), f"r{i} ({fault}): {result!r}"
    failures = sum(1 for *_, fault, _ in specs if fault not in ("none", "abort"))
    assert engine.get_stats()["requests"]["failed"] == failed_before + failures
    assert_idle_and_serving(engine, expected)


def test_a_request_whose_completions_fail_together_leaves_the_others(engine, expected, monkeypatch):
    """n = 3 with a failing stop-string filter: completion 0 fails first; the other two's tokens of that
    step arrive for a request that has already ended and are dropped, not an error for everyone."""
    inject_faults(monkeypatch)
    other = engine.stream(PROMPTS[0], max_tokens=MAX_TOKENS, ignore_eos=True)
    next(other)
    with pytest.raises(RequestFailedError, match="stop-string filter"):
        engine.generate(PROMPTS[2], n=3, temperature=1.0, seed=3, max_tokens=6, ignore_eos=True, stop=[VICTIM_STOP])
    assert list(other)[-1].token_ids == expected[PROMPTS[0]]
    assert_idle_and_serving(engine, expected)


def aborting_from_inside_each_step(engine, request_id):
    """LLMEngine.on_step runs on the engine thread in the middle of the loop: an abort asked there arrives
    while the loop is between taking its inbox and the next step. Returns what each abort() answered."""
    answers = []
    engine.llm.on_step = lambda record: answers.append(engine.abort(request_id))
    return answers


def test_an_abort_arriving_between_steps_ends_the_request_and_not_its_neighbour(engine, expected):
    other = engine.stream(PROMPTS[0], max_tokens=MAX_TOKENS, ignore_eos=True)
    next(other)
    answers = aborting_from_inside_each_step(engine, "running")
    try:
        aborted = list(engine.stream(PROMPTS[2], request_id="running", max_tokens=MAX_TOKENS, ignore_eos=True))[-1]
    finally:
        engine.llm.on_step = None
    assert True in answers
    assert aborted.finish_reason == "abort" and len(aborted.token_ids) < MAX_TOKENS
    assert aborted.token_ids == expected[PROMPTS[2]][: len(aborted.token_ids)]
    assert list(other)[-1].token_ids == expected[PROMPTS[0]]
    assert_idle_and_serving(engine, expected)


def test_an_abort_arriving_after_the_request_finished_changes_nothing(engine, expected):
    """The request finishes in its first step (one token); the abort asked during that step is still
    queued when the loop has already sent the result: the result stands and nothing else is touched."""
    answers = aborting_from_inside_each_step(engine, "finishing")
    try:
        done = engine.stream(PROMPTS[1], request_id="finishing", max_tokens=1, ignore_eos=True)
        result = list(done)[-1]
    finally:
        engine.llm.on_step = None
    assert answers[0] is True, "the abort was asked while the request was still in flight"
    assert result.finish_reason == "length" and result.token_ids == expected[PROMPTS[1]][:1]
    assert not engine.abort("finishing")
    assert_idle_and_serving(engine, expected)


def test_aborting_a_request_leaves_one_whose_id_merely_extends_its_id(engine, expected):
    x = engine.stream(PROMPTS[2], request_id="x", max_tokens=MAX_TOKENS, ignore_eos=True)
    x1 = engine.stream(PROMPTS[0], request_id="x#1", max_tokens=MAX_TOKENS, ignore_eos=True)
    next(x), next(x1)
    assert engine.abort("x")
    assert list(x)[-1].finish_reason == "abort"
    rest = list(x1)[-1]
    assert rest.finish_reason == "length" and rest.token_ids == expected[PROMPTS[0]]
    assert_idle_and_serving(engine, expected)


def run_to_the_end(llm):
    tokens, finishes = {}, {}
    while llm.has_unfinished():
        for event in llm.step():
            tokens.setdefault(event.request_id, []).append(event.token_id)
            if event.finish_reason:
                finishes[event.request_id] = event.finish_reason
    return tokens, finishes


def test_llm_engine_aborts_a_request_with_exactly_its_own_completions(tiny_loaded):
    llm = LLMEngine(tiny_loaded.model, EngineConfig(block_size=4, num_blocks=64))
    ids = tiny_loaded.tokenizer("hello")["input_ids"]
    sampled = SamplingParams(n=3, max_tokens=6, temperature=1.0, seed=0, ignore_eos=True)
    llm.add_request(ids, sampled, request_id="x")
    llm.add_request(ids, SamplingParams(max_tokens=6, ignore_eos=True), request_id="x#10")  # not one of x's
    llm.add_request(ids, sampled, request_id="z")
    llm.step()  # the prompts' prefill; the other completions are forked from it
    assert llm.abort("x") and llm.abort("z#1")  # all of x; one completion of z
    tokens, finishes = run_to_the_end(llm)
    assert finishes == {"x#10": "length", "z": "length", "z#2": "length"}
    assert all(len(tokens[rid]) == 5 for rid in finishes)  # the 5 tokens after the first step's
    assert llm.stats["request_blocks"] == 0 and not llm.abort("x")


def test_an_id_taken_by_another_requests_completion_is_refused(engine, expected, monkeypatch):
    step = engine.llm.step

    def slow_step():  # y must still be running when y#1 is asked for (the tiny model makes 12 tokens in ms)
        time.sleep(0.02)
        return step()

    monkeypatch.setattr(engine.llm, "step", slow_step)
    x = engine.stream(PROMPTS[2], request_id="y", n=2, max_tokens=MAX_TOKENS, ignore_eos=True)
    next(x)
    with pytest.raises(InvalidRequestError, match="already in use"):
        list(engine.stream(PROMPTS[0], request_id="y#1", max_tokens=2))
    result = list(x)[-1]
    assert [o.finish_reason for o in result.outputs] == ["length", "length"]
    assert result.outputs[0].token_ids == expected[PROMPTS[2]]
    assert_idle_and_serving(engine, expected)


def test_a_dead_loop_fails_its_callers_and_says_so(tiny_loaded, monkeypatch):
    """A step fails and then giving the blocks back fails too: the engine's state can no longer be trusted,
    so the loop stops; callers get an EngineError instead of waiting forever, and the stats say why."""
    engine = InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=64))
    try:
        engine.check_health()
        assert engine.get_stats()["loop_alive"]

        def broken(*args, **kwargs):
            raise RuntimeError("injected: device lost")

        monkeypatch.setattr(engine.llm.runner, "run", broken)
        monkeypatch.setattr(engine.llm, "abort", broken)
        with pytest.raises(EngineError, match="stopped"):
            engine.generate(PROMPTS[1], max_tokens=3)
        stats = engine.get_stats()
        assert stats["loop_alive"] is False and "injected: device lost" in stats["loop_error"]
        with pytest.raises(EngineError, match="device lost"):
            engine.check_health()
        with pytest.raises(EngineError, match="stopped"):
            engine.generate(PROMPTS[1], max_tokens=3)
    finally:
        engine.close()  # returns: the thread is gone already


def test_closing_an_async_stream_aborts_its_request_at_once(engine, expected):
    """Not later, when the event loop gets round to finalizing generators: a server closes the stream of a
    client that went away and goes on with other work."""

    async def main():
        stream = engine.stream_async(PROMPTS[2], request_id="closed", max_tokens=MAX_TOKENS, ignore_eos=True)
        await stream.__anext__()
        await stream.aclose()
        # no await since the close; the loop takes the queued abort before this request
        result = engine.generate(PROMPTS[1], max_tokens=1, ignore_eos=True)
        return result, engine.get_stats()["requests"]["in_flight"]

    result, in_flight = asyncio.run(main())
    assert in_flight == 0 and result.token_ids == expected[PROMPTS[1]][:1]
    assert_idle_and_serving(engine, expected)
