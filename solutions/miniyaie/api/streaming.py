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

import asyncio
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
    # Nudge: the clock counts tokens, not deltas.
    # Hint 1: A CompletionDelta is what one step added to one completion; it may hold several
    #   tokens (or none, at a finish), and each is a token the latency metrics must count. The
    #   GenerationOutput at the end is the request's result: the clock's finish.
    # Hint 2: For a CompletionDelta call timer.on_token(item.index) once per entry of its
    #   token_ids; for anything else call timer.on_finish(item).
    # Hint 3:
    #   if isinstance(item, CompletionDelta): for _ in item.token_ids: timer.on_token(item.index)
    #   else: timer.on_finish(item)
    # BEGIN SOLUTION 6.4: Answer unless the client hangs up
    if isinstance(item, CompletionDelta):
        for _ in item.token_ids:
            timer.on_token(item.index)
    else:
        timer.on_finish(item)
    # END SOLUTION


async def collect(items: EngineItems, timer: RequestTimer) -> GenerationOutput:
    """Run a request to its end (non-streaming responses): the last item `items` yields, its result
    (None if it yields nothing).

    Every item is observed on the way (observe). However collect ends (the stream ran out, an item
    raised, or collect itself was cancelled because the client left), `items` is closed
    (`await items.aclose()`) before collect returns or raises: closing the engine stream is what
    aborts a request that is still running and returns its KV blocks.
    """
    # Nudge: whatever ends the loop, the engine stream must be closed.
    # Hint 1: An async generator that is abandoned half-way is not closed at once; the engine
    #   would keep decoding for nobody until the garbage collector got to it. A cancellation
    #   arrives as an exception at the await inside the loop, so only a `finally` sees every
    #   way out. The result is simply the last item: the engine stream ends with the request's
    #   GenerationOutput.
    # Hint 2: result = None; in a try, for each item of the async iteration: observe it and keep
    #   it as the result; in the finally, await items.aclose(). Return the result.
    # Hint 3:
    #   result = None
    #   try:
    #       async for item in items: observe(item, timer); result = item
    #   finally: await items.aclose()
    #   return result
    # BEGIN SOLUTION 6.4: Answer unless the client hangs up
    result = None
    try:
        async for item in items:
            observe(item, timer)
            result = item
    finally:
        await items.aclose()
    return result
    # END SOLUTION
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
    # Nudge: awaiting either one alone misses the other; what may still be running when you return?
    # Hint 1: Awaiting `work` alone would never notice the hang-up; awaiting the hang-up alone
    #   would never return the answer. Run both as tasks and wait for the first to complete.
    #   The loser must not outlive the call: a listener left running leaks, and a collection
    #   left running keeps decoding for nobody and holds KV blocks. A cancelled task has not
    #   stopped yet: wait for it to unwind (its exception, CancelledError, is expected).
    # Hint 2: Wrap work and until_disconnected(request) in tasks (asyncio.ensure_future). Wait
    #   for the first completed (asyncio.wait, FIRST_COMPLETED). In a finally (so that it
    #   also runs when the route itself is cancelled): cancel the listener; if the work is
    #   not done, cancel it and await it, ignoring its exception. Then, if the work was not
    #   among the done tasks, raise ClientDisconnected; else return its result.
    # Hint 3:
    #   task = ensure_future(work); watcher = ensure_future(until_disconnected(request))
    #   try: done, _ = await asyncio.wait((task, watcher), return_when=FIRST_COMPLETED)
    #   finally:
    #       watcher.cancel()
    #       if not task.done(): task.cancel(); await asyncio.gather(task, return_exceptions=True)
    #   if task not in done: raise ClientDisconnected
    #   return task.result()
    # BEGIN SOLUTION 6.4: Answer unless the client hangs up
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnected(request))
    try:
        done, _ = await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()  # inside collect(): the engine stream is closed, which aborts the request
            await asyncio.gather(task, return_exceptions=True)
    if task not in done:
        raise ClientDisconnected
    return task.result()
    # END SOLUTION
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
    # Nudge: once streaming, errors travel as events, and however it ends the engine stream is closed.
    # Hint 1: Three ways out: the engine finishes (then [DONE]); the engine raises EngineError
    #   mid-stream (then one error event in OpenAI's error shape, then [DONE]); the client goes
    #   away (the server closes this generator: nothing more can be sent). In every case the
    #   engine stream is closed, which is what aborts a request still running. Every item also
    #   feeds the request's timer, for the latency metrics.
    # Hint 2: Loop over the items asynchronously; observe each one with the timer; turn it into
    #   chunks with the chunker and yield each as an SSE event; then yield the [DONE] event.
    #   Catch EngineError: map it with from_engine_error, yield its error_body as an event and
    #   [DONE]. Close the items in a finally block.
    # Hint 3:
    #   try:
    #       async for item in items: observe(item, timer); for chunk in chunker.feed(item): yield sse_event(chunk)
    #       yield sse_done()
    #   except EngineError as exc:
    #       error = from_engine_error(exc); yield sse_event(error_body(error.status, error.message, error.param, error.code))
    #       yield sse_done()
    #   finally: await items.aclose()
    # BEGIN SOLUTION 6.7: Stream server-sent events, abort on disconnect
    try:
        async for item in items:
            observe(item, timer)
            for chunk in chunker.feed(item):
                yield sse_event(chunk)
        yield sse_done()
    except EngineError as exc:
        error = from_engine_error(exc)
        log.warning("stream failed: %s", error.message)
        yield sse_event(error_body(error.status, error.message, error.param, error.code))
        yield sse_done()
    finally:
        await items.aclose()
    # END SOLUTION
# ANCHOR_END: event_stream


# ANCHOR: count_unfinished
async def count_unfinished(events: AsyncIterator[str], timer: RequestTimer) -> AsyncIterator[str]:
    """Pass the events through, in order; a stream that ends before its request finished counts as aborted.

    However this generator ends (the events run out, one of them raises, or the server closes
    it because the client left), `events` is closed, which aborts a request still running,
    and `timer.metrics.aborted` grows by one unless the request finished (`timer.finished`).
    An exception from `events` goes on up.
    """
    # Nudge: an async generator closed from outside runs only its finally; the one inside must be closed by hand.
    # Hint 1: When a client leaves, the ASGI server closes the generator it was reading, this one
    #   (aclose raises GeneratorExit at the yield). Nothing closes the generator wrapped
    #   inside: left open, it holds its request until the garbage collector gets to it,
    #   maybe never. So the wrapper closes it itself, on every way out, and only then counts:
    #   the timer says whether the request had finished.
    # Hint 2: Yield each event of `events` inside try; in finally, await events.aclose(), then
    #   increment timer.metrics.aborted if not timer.finished.
    # Hint 3:
    #   try:
    #       async for event in events: yield event
    #   finally:
    #       await events.aclose()
    #       if not timer.finished: timer.metrics.aborted.inc()
    # BEGIN SOLUTION 6.7: Stream server-sent events, abort on disconnect
    try:
        async for event in events:
            yield event
    finally:
        await events.aclose()  # closing this generator must close the one inside (that aborts the request)
        if not timer.finished:
            timer.metrics.aborted.inc()
    # END SOLUTION
# ANCHOR_END: count_unfinished
