"""Task 5.15: the front door — a batch in flight together, and no request left running for nobody.

Each test ends by checking that no request is left in the engine and no
request holds a KV block: a request whose reader left must have been aborted.
"""

import asyncio
import time

import pytest

from miniyaie.engine import EngineConfig, GenerationOutput, InferenceEngine, RequestFailedError

PROMPTS = ["The capital of France is", "hello", "Once upon a time there was a small engine that", "1, 2, 3,"]
WAIT = 30  # seconds: a reader that never gets its answer fails here instead of hanging


@pytest.fixture
def engine(tiny_loaded):
    with InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=96, max_num_batched_tokens=64)) as e:
        yield e


def slow_steps(engine, monkeypatch, seconds: float = 0.005) -> None:
    """Each engine step takes at least `seconds`, so that a request left running for nobody would run on for
    a long while (its room in the context, about 100 tokens, takes 0.5 s) and an abort shows as a short output."""
    step = engine.llm.step

    def slow_step():
        time.sleep(seconds)
        return step()

    monkeypatch.setattr(engine.llm, "step", slow_step)


def room(engine, prompt: str) -> int:
    """How many tokens the request could generate: the context left by its prompt."""
    return engine.context_length - len(engine.encode(prompt))


def settled(engine) -> dict:
    """The engine's stats once its loop has applied every abort queued so far (a request through it syncs)."""
    engine.generate(PROMPTS[1], max_tokens=1)
    deadline = time.monotonic() + WAIT
    while engine.get_stats()["requests"]["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.01)
    return engine.get_stats()


def assert_nothing_left(engine) -> None:
    stats = settled(engine)
    assert stats["requests"]["in_flight"] == stats["requests"]["running"] == stats["requests"]["waiting"] == 0, (
        f"a request is left in the engine: {stats['requests']} (a reader that leaves early must abort its request)")
    assert stats["kv_blocks"]["held_by_requests"] == 0, f"{stats['kv_blocks']['held_by_requests']} blocks still held"


@pytest.mark.task("5.15")
def test_a_batch_runs_together_and_answers_in_prompt_order(engine):
    alone = [engine.generate(p, max_tokens=8, ignore_eos=True) for p in PROMPTS]
    before = engine.get_stats()["steps"]
    together = engine.generate(PROMPTS, max_tokens=8, ignore_eos=True)
    steps = engine.get_stats()["steps"] - before
    assert [r.token_ids for r in together] == [r.token_ids for r in alone], "a list in, its results in prompt order"
    assert [r.prompt for r in together] == PROMPTS
    assert steps <= 10, (
        f"4 prompts of 8 tokens each took {steps} steps: they must all be in flight at once (about 8 steps), "
        "not one after the other (32 or more)")
    assert isinstance(engine.generate(PROMPTS[0], max_tokens=2), GenerationOutput), "one prompt in, one result out"
    assert engine.generate([], max_tokens=2) == []
    assert_nothing_left(engine)


@pytest.mark.task("5.15")
def test_a_failed_request_aborts_the_rest_of_its_batch(engine, monkeypatch):
    processor = engine._loop.processor  # the engine thread's: a fault planted in one request's token handling
    on_event = processor.on_event

    def failing(event):
        request = processor.request_of(event.request_id)
        if request is not None and request.prompt == PROMPTS[1]:
            raise RuntimeError("injected: this request's token cannot be handled")
        on_event(event)

    monkeypatch.setattr(processor, "on_event", failing)
    slow_steps(engine, monkeypatch)
    before = engine.get_stats()["tokens"]["output"]
    with pytest.raises(RequestFailedError, match="injected"):
        engine.generate([PROMPTS[1], PROMPTS[2], PROMPTS[3]], max_tokens=200, ignore_eos=True)
    monkeypatch.setattr(processor, "on_event", on_event)
    generated = settled(engine)["tokens"]["output"] - before
    unread = room(engine, PROMPTS[2]) + room(engine, PROMPTS[3])
    assert generated < unread / 2, (
        f"{generated} tokens of the {unread} the other two could make: the batch's first request failed, so nobody "
        "reads the other two; abort them")
    assert_nothing_left(engine)


@pytest.mark.task("5.15")
def test_a_stream_is_deltas_then_the_result_and_closing_it_early_aborts(engine, monkeypatch):
    items = list(engine.stream(PROMPTS[0], max_tokens=6, ignore_eos=True))
    assert isinstance(items[-1], GenerationOutput) and not any(isinstance(i, GenerationOutput) for i in items[:-1])
    assert "".join(d.text for d in items[:-1]) == items[-1].text
    slow_steps(engine, monkeypatch)
    before = engine.get_stats()["tokens"]["output"]
    stream = engine.stream(PROMPTS[2], max_tokens=200, ignore_eos=True)
    next(stream)
    stream.close()  # the reader leaves
    generated = settled(engine)["tokens"]["output"] - before - 1  # settled's own request made one
    assert generated < room(engine, PROMPTS[2]) / 2, (
        f"the request ran on ({generated} of its {room(engine, PROMPTS[2])} tokens) after its reader closed the stream")
    assert_nothing_left(engine)


@pytest.mark.task("5.15")
def test_an_async_reader_that_leaves_or_is_cancelled_aborts_its_request(engine, monkeypatch):
    async def leave_early():
        stream = engine.stream_async(PROMPTS[2], max_tokens=200, ignore_eos=True)
        first = await stream.__anext__()
        await stream.aclose()
        # stay in this event loop, as a server does after one client leaves: were the loop closed, the engine
        # would notice that nobody can read the request (its sink says so) and drop it by itself
        deadline = time.monotonic() + 1.0
        while engine.get_stats()["requests"]["in_flight"] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert engine.get_stats()["requests"]["in_flight"] == 0, (
            "the async stream was closed a second ago and its request still runs: closing it must abort it")
        return first

    async def cancel_a_waiting_reader():
        task = asyncio.create_task(engine.generate_async(PROMPTS[2], max_tokens=200, ignore_eos=True))
        while not engine.get_stats()["tokens"]["output"] > started:  # it is waiting for its answer
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def concurrent():
        return await asyncio.gather(*(engine.generate_async(p, max_tokens=6, ignore_eos=True) for p in PROMPTS))

    slow_steps(engine, monkeypatch)
    for leave in (leave_early, cancel_a_waiting_reader):
        started = engine.get_stats()["tokens"]["output"]
        asyncio.run(asyncio.wait_for(leave(), WAIT))
        generated = settled(engine)["tokens"]["output"] - started - 1  # settled's own request made one
        assert generated < room(engine, PROMPTS[2]) / 2, (
            f"{leave.__name__}: {generated} of {room(engine, PROMPTS[2])} tokens: a request whose async reader left "
            "ran on for nobody")
    monkeypatch.undo()
    results = asyncio.run(asyncio.wait_for(concurrent(), WAIT))
    assert [r.token_ids for r in results] == [engine.generate(p, max_tokens=6, ignore_eos=True).token_ids for p in PROMPTS]
    assert_nothing_left(engine)


@pytest.mark.task("5.15")
def test_an_interrupted_batch_aborts_all_of_its_requests(engine, monkeypatch):
    """Ctrl-C while the results are read is a BaseException, not an Exception: the batch must not run on."""
    slow_steps(engine, monkeypatch)
    read = engine._result
    calls = []

    def interrupted(request):
        calls.append(request)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return read(request)

    monkeypatch.setattr(engine, "_result", interrupted)
    before = engine.get_stats()["tokens"]["output"]
    with pytest.raises(KeyboardInterrupt):
        engine.generate([PROMPTS[2], PROMPTS[3]], max_tokens=200, ignore_eos=True)
    monkeypatch.setattr(engine, "_result", read)
    generated = settled(engine)["tokens"]["output"] - before - 1  # settled's own request made one
    unread = room(engine, PROMPTS[2]) + room(engine, PROMPTS[3])
    assert generated < unread / 2, f"{generated} of {unread} tokens: an interrupted batch ran on for nobody"
    assert_nothing_left(engine)


@pytest.mark.task("5.15")
def test_a_bad_prompt_anywhere_in_a_batch_refuses_it_before_any_prompt_runs(engine):
    from miniyaie.engine import InvalidRequestError

    before = engine.get_stats()
    with pytest.raises(InvalidRequestError):
        engine.generate([PROMPTS[0], PROMPTS[1], "word " * 200], max_tokens=4)  # the last one is too long
    after = settled(engine)
    assert after["tokens"]["prompt"] - before["tokens"]["prompt"] == len(engine.encode(PROMPTS[1])), (
        "the good prompts of a refused batch ran: check every prompt before submitting any (only settled's own "
        "request may have run since)")
    assert_nothing_left(engine)


@pytest.mark.task("5.15")
def test_results_pass_through_the_adapters(tiny_loaded):
    from miniyaie.engine import ModelAdapter

    class Shout(ModelAdapter):
        def process_output(self, output):
            for completion in output.outputs:
                completion.text = completion.text.upper() + "!"
            return output

    with InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=96), adapters=[Shout()]) as engine:
        plain = engine.generate(PROMPTS[0], max_tokens=4, ignore_eos=True).text
        streamed = list(engine.stream(PROMPTS[0], max_tokens=4, ignore_eos=True))[-1].text

        async def awaited():
            return (await engine.generate_async(PROMPTS[0], max_tokens=4, ignore_eos=True)).text

        assert plain.endswith("!") and streamed == plain == asyncio.run(asyncio.wait_for(awaited(), WAIT)), (
            "every result, streamed, awaited or returned, goes through the adapters' process_output (self._finish)")
