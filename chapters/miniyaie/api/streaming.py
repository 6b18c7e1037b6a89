"""Driving one request through the engine: collected into a result, or streamed as SSE.

Both paths read the same engine stream (`InferenceEngine.submit_prepared`'s), so
both feed the latency metrics, and both abort the request when the client
goes away, so that its KV blocks return to the pool at once:

- streamed: the ASGI server stops pulling the event generator (Starlette
  cancels it or closes it), and closing the engine stream aborts the request;
- collected: nothing is sent until the answer is complete, so nothing would
  notice; `unless_disconnected` listens for the client's hang-up meanwhile
  and cancels the collection, which closes the engine stream the same way.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Protocol, TypeVar

from starlette.requests import Request

from miniyaie.api.errors import ClientDisconnected, error_body, from_engine_error
from miniyaie.api.metrics import RequestTimer
from miniyaie.api.sse import sse_done, sse_event
from miniyaie.engine import CompletionDelta, EngineError, GenerationOutput

log = logging.getLogger("miniyaie.api")
EngineItems = AsyncIterator[CompletionDelta | GenerationOutput]
T = TypeVar("T")


class Chunker(Protocol):
    def feed(self, item: CompletionDelta | GenerationOutput) -> list[dict]: ...


# ANCHOR: collect
def observe(item: CompletionDelta | GenerationOutput, timer: RequestTimer) -> None:
    """Tell the request's clock what arrived: a delta's every token (timer.on_token(delta.index), once per
    token id: one step may bring several, as a jump-forward does), or the final result (timer.on_finish)."""
    # Idea: the clock counts tokens, not deltas.
    # Stuck? `miniyaie hint 6.4` prints hints, one level at a time.
    # TODO(Task 6.4): Answer unless the client hangs up. Replace this line with your code.
    raise NotImplementedError('Chapter 6, Task 4: Answer unless the client hangs up — see book/src/ch06_api.md')


async def collect(items: EngineItems, timer: RequestTimer) -> GenerationOutput:
    """Run a request to its end (non-streaming responses): the last item `items` yields, its result
    (None if it yields nothing).

    Every item is observed on the way (observe). However collect ends (the stream ran out, an item
    raised, or collect itself was cancelled because the client left), `items` is closed
    (`await items.aclose()`) before collect returns or raises: closing the engine stream is what
    aborts a request that is still running and returns its KV blocks.
    """
    # Idea: whatever ends the loop, the engine stream must be closed.
    # Stuck? `miniyaie hint 6.4` prints hints, one level at a time.
    # TODO(Task 6.4): Answer unless the client hangs up. Replace this line with your code.
    raise NotImplementedError('Chapter 6, Task 4: Answer unless the client hangs up — see book/src/ch06_api.md')
# ANCHOR_END: collect


# ANCHOR: unless_disconnected
async def until_disconnected(request: Request) -> None:
    """Return once the client has hung up (the ASGI server's `http.disconnect` message).

    The route has read the whole body already, so the next message can only
    be the disconnect.
    """
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """The result of `work`; ClientDisconnected if the client hangs up first (`work` is cancelled then).

    Whichever comes first wins. If the client hangs up first, `work` is
    cancelled and has finished unwinding (its `finally` blocks ran: that is what
    closes the engine stream) before ClientDisconnected is raised. If `work`
    ends first, its result is returned or its exception raised, as it is. Either
    way no task is left running: the listener for the hang-up is cancelled too.
    """
    # Idea: awaiting either one alone misses the other; what may still be running when you return?
    # Stuck? `miniyaie hint 6.4` prints hints, one level at a time.
    # TODO(Task 6.4): Answer unless the client hangs up. Replace this line with your code.
    raise NotImplementedError('Chapter 6, Task 4: Answer unless the client hangs up — see book/src/ch06_api.md')
# ANCHOR_END: unless_disconnected


# ANCHOR: event_stream
async def event_stream(items: EngineItems, chunker: Chunker, timer: RequestTimer) -> AsyncIterator[str]:
    """The SSE events of one request: its chunks as they come, then `data: [DONE]`.

    An engine error mid-stream (the headers are already sent, so no 4xx/5xx
    status can be given any more) becomes one error event, then [DONE].
    However the stream ends (finished, failed, or closed early because the
    client went away) the engine stream is closed, which aborts the request
    if it is still running.
    """
    # Idea: once streaming, errors travel as events, and however it ends the engine stream is closed.
    # Stuck? `miniyaie hint 6.7` prints hints, one level at a time.
    # TODO(Task 6.7): Stream server-sent events, abort on disconnect. Replace these lines with your code.
    raise NotImplementedError('Chapter 6, Task 7: Stream server-sent events, abort on disconnect — see book/src/ch06_api.md')
    yield  # never runs: it keeps this function a generator, as its callers expect
# ANCHOR_END: event_stream


# ANCHOR: count_unfinished
async def count_unfinished(events: AsyncIterator[str], timer: RequestTimer) -> AsyncIterator[str]:
    """Pass the events through, in order; a stream that ends before its request finished counts as aborted.

    However this generator ends (the events run out, one of them raises, or the server closes
    it because the client left), `events` is closed, which aborts a request still running,
    and `timer.metrics.aborted` grows by one unless the request finished (`timer.finished`).
    An exception from `events` goes on up.
    """
    # Idea: an async generator closed from outside runs only its finally; the one inside must be closed by hand.
    # Stuck? `miniyaie hint 6.7` prints hints, one level at a time.
    # TODO(Task 6.7): Stream server-sent events, abort on disconnect. Replace these lines with your code.
    raise NotImplementedError('Chapter 6, Task 7: Stream server-sent events, abort on disconnect — see book/src/ch06_api.md')
    yield  # never runs: it keeps this function a generator, as its callers expect
# ANCHOR_END: count_unfinished
