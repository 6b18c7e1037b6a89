"""Driving one request through the engine: collected into a result, or streamed as SSE.

Both paths read the same engine stream (`InferenceEngine.stream_async`), so
both feed the latency metrics. The streaming path is where disconnects are
handled: when the client goes away, the ASGI server stops pulling this
generator (Starlette cancels it or closes it); closing the engine stream
aborts the request, and its KV blocks return to the pool at once.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Protocol

from miniyaie.api.errors import error_body, from_engine_error
from miniyaie.api.metrics import RequestTimer
from miniyaie.api.sse import sse_done, sse_event
from miniyaie.engine import CompletionDelta, EngineError, GenerationOutput

log = logging.getLogger("miniyaie.api")
EngineItems = AsyncIterator[CompletionDelta | GenerationOutput]


class Chunker(Protocol):
    def feed(self, item: CompletionDelta | GenerationOutput) -> list[dict]: ...


def observe(item: CompletionDelta | GenerationOutput, timer: RequestTimer) -> None:
    """Tell the request's clock what arrived."""
    if isinstance(item, CompletionDelta):
        for _ in item.token_ids:
            timer.on_token(item.index)
    else:
        timer.on_finish(item)


async def collect(items: EngineItems, timer: RequestTimer) -> GenerationOutput:
    """Run a request to its end (non-streaming responses); its result."""
    result = None
    async for item in items:
        observe(item, timer)
        result = item
    return result


# ANCHOR: event_stream
async def event_stream(items: EngineItems, chunker: Chunker, timer: RequestTimer) -> AsyncIterator[str]:
    """The SSE events of one request: its chunks as they come, then `data: [DONE]`.

    An engine error mid-stream (the headers are already sent, so no 4xx/5xx
    status can be given any more) becomes one error event, then [DONE].
    However the stream ends (finished, failed, or closed early because the
    client went away) the engine stream is closed, which aborts the request
    if it is still running.
    """
    # Hint: iterate `items` (async for); observe(item, timer); yield
    # sse_event(chunk) for every chunk of chunker.feed(item); end with
    # sse_done(). Catch EngineError: yield sse_event(error_body(...)) built
    # from from_engine_error(exc), then [DONE]. In `finally`, await
    # items.aclose(): that is what aborts an abandoned request.
    # TODO(Task 6.4): Stream chunks, abort on disconnect. Replace these lines with your code.
    raise NotImplementedError('Chapter 6, Task 4: Stream chunks, abort on disconnect — see book/src/ch06_api.md')
    yield  # never runs: it keeps this function a generator, as its callers expect
# ANCHOR_END: event_stream


# ANCHOR: count_unfinished
async def count_unfinished(events: AsyncIterator[str], timer: RequestTimer) -> AsyncIterator[str]:
    """Pass the events through; a stream that ends before its request finished counts as aborted."""
    try:
        async for event in events:
            yield event
    finally:
        await events.aclose()  # closing this generator must close the one inside (that aborts the request)
        if not timer.finished:
            timer.metrics.aborted.inc()
# ANCHOR_END: count_unfinished
