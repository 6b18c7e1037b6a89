"""Task 6.7's event_stream and count_unfinished on their own, without a server: events, an engine error, a client gone."""

import asyncio

import pytest

from miniyaie.api.errors import error_body, from_engine_error
from miniyaie.api.metrics import ServerMetrics
from miniyaie.api.sse import sse_done, sse_event
from miniyaie.api.streaming import count_unfinished, event_stream
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


@pytest.mark.task("6.7")
def test_every_chunk_becomes_an_event_then_done():
    items = EngineItems(DELTAS + [RESULT])
    events, timer = events_of(items)
    chunks = [chunk for item in DELTAS + [RESULT] for chunk in Chunker().feed(item)]
    assert events == [sse_event(chunk) for chunk in chunks] + [sse_done()]
    assert items.closed_in_time, "the engine stream is closed when the events end"
    assert timer.finished, "every item goes past the request's clock (observe), the result included"


@pytest.mark.task("6.7")
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


@pytest.mark.task("6.7")
def test_a_client_that_leaves_early_closes_the_engine_stream():
    items = EngineItems(DELTAS + [RESULT])
    events, _ = events_of(items, take=1)
    assert len(events) == 1
    assert items.closed_in_time, "when the client goes away the engine stream must be closed (that aborts the request)"


def wrapped(events, finishes: bool, take=None):
    """What count_unfinished passes on from `events` (a list: an exception in it is raised there), read whole or
    closed after `take` like a server whose client left; the timer's request finishes before the last event
    when `finishes`. Returns (events read, the exception that came out or None, inner closed in time, aborted count)."""
    metrics = ServerMetrics(engine=None)
    timer = metrics.timer()
    inner = {"closed": False}

    async def source():
        try:
            for i, event in enumerate(events):
                if isinstance(event, BaseException):
                    raise event
                if finishes and i == len(events) - 1:
                    timer.on_finish(RESULT)
                yield event
        finally:
            inner["closed"] = True

    async def run():
        stream = count_unfinished(source(), timer)
        assert hasattr(stream, "__aiter__"), "count_unfinished must be an async generator (async def with yield)"
        read, error = [], None
        try:
            async for event in stream:
                read.append(event)
                if take is not None and len(read) == take:
                    break
        except Exception as exc:  # what came out of the wrapper: the test looks at it
            error = exc
        await stream.aclose()
        return read, error, inner["closed"]

    read, error, closed = asyncio.run(run())
    return read, error, closed, metrics.registry.get_sample_value("miniyaie_aborted_streams_total")


EVENTS = ["data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"]


@pytest.mark.task("6.7")
def test_a_finished_stream_passes_every_event_and_is_not_counted_as_aborted():
    read, error, closed, aborted = wrapped(EVENTS, finishes=True)
    assert read == EVENTS and error is None
    assert closed, "the stream inside is closed when the events run out"
    assert aborted == 0, "a stream whose request finished is not an aborted one"


@pytest.mark.task("6.7")
def test_a_stream_closed_early_closes_the_one_inside_and_counts_as_aborted():
    read, _, closed, aborted = wrapped(EVENTS, finishes=True, take=1)
    assert read == EVENTS[:1]
    assert closed, ("the server closes count_unfinished when its client leaves; nothing closes the stream inside "
                    "unless count_unfinished does (await events.aclose() in a finally), and that is what aborts the request")
    assert aborted == 1, "a stream closed before its request finished counts once in miniyaie_aborted_streams"


@pytest.mark.task("6.7")
def test_a_failing_stream_raises_on_and_counts_as_aborted():
    boom = RuntimeError("boom")
    read, error, closed, aborted = wrapped([EVENTS[0], boom], finishes=False)
    assert read == EVENTS[:1] and error is boom, f"the exception goes on up as it is; got {error!r}"
    assert closed and aborted == 1
