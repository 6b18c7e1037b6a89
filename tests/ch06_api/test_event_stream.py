"""Task 6.8's event_stream on its own, without a server: its events, an engine error mid-stream, a client gone."""

import asyncio

import pytest

from miniyaie.api.errors import error_body, from_engine_error
from miniyaie.api.metrics import ServerMetrics
from miniyaie.api.sse import sse_done, sse_event
from miniyaie.api.streaming import event_stream
from miniyaie.engine import CompletionDelta, GenerationOutput, RequestFailedError
from miniyaie.engine.outputs import CompletionOutput

DELTAS = [CompletionDelta("r", 0, "Hel", [1]), CompletionDelta("r", 0, "lo", [2], "length")]
RESULT = GenerationOutput("r", "hi", [5], [CompletionOutput(0, "Hello", [1, 2], "length")])


class Chunker:
    """Two chunks per delta and one for the result: event_stream must send every chunk, in order."""

    def feed(self, item):
        if isinstance(item, CompletionDelta):
            return [{"text": item.text}, {"tokens": item.token_ids}]
        return [{"finished": item.finish_reason}]


class EngineItems:
    """An engine stream that yields `items` (an exception in it is raised there) and records being closed."""

    def __init__(self, items):
        self.items, self.closed, self.closed_in_time = items, False, False

    async def _generate(self):
        try:
            for item in self.items:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.closed = True

    def __call__(self):
        self.stream = self._generate()
        return self.stream


def events_of(items, take=None):
    """The events event_stream produces (all, or the first `take`, then it is closed like a client leaving)."""

    async def run():
        timer = ServerMetrics(engine=None).timer()
        stream = event_stream(items(), Chunker(), timer)
        assert hasattr(stream, "__aiter__"), "event_stream must be an async generator (async def with yield)"
        events = []
        async for event in stream:
            events.append(event)
            if take is not None and len(events) == take:
                break
        await stream.aclose()
        items.closed_in_time = items.closed  # before asyncio.run's shutdown closes every leftover generator
        return events, timer

    return asyncio.run(run())


@pytest.mark.task("6.8")
def test_every_chunk_becomes_an_event_then_done():
    items = EngineItems(DELTAS + [RESULT])
    events, timer = events_of(items)
    chunks = [chunk for item in DELTAS + [RESULT] for chunk in Chunker().feed(item)]
    assert events == [sse_event(chunk) for chunk in chunks] + [sse_done()]
    assert items.closed_in_time, "the engine stream is closed when the events end"
    assert timer.finished, "every item goes past the request's clock (observe), the result included"


@pytest.mark.task("6.8")
def test_an_engine_error_mid_stream_is_one_error_event_then_done():
    failure = RequestFailedError("the engine step failed: boom")
    items = EngineItems([DELTAS[0], failure])
    events, _ = events_of(items)
    error = from_engine_error(failure)
    expected_error = sse_event(error_body(error.status, error.message, error.param, error.code))
    assert events[:2] == [sse_event(chunk) for chunk in Chunker().feed(DELTAS[0])], "the chunks before the error still go out"
    assert events[2:] == [expected_error, sse_done()], (
        "after the headers are sent an engine error cannot be a status code: send it as one error event "
        f"(the OpenAI error body) and then [DONE]; got {events[2:]}"
    )
    assert items.closed_in_time, "the engine stream is closed after an error too"


@pytest.mark.task("6.8")
def test_a_client_that_leaves_early_closes_the_engine_stream():
    items = EngineItems(DELTAS + [RESULT])
    events, _ = events_of(items, take=1)
    assert len(events) == 1
    assert items.closed_in_time, "when the client goes away the engine stream must be closed (that aborts the request)"
