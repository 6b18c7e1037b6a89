"""One request's answers on their way from the engine thread to its caller, a thread or a coroutine.

The engine thread `put`s a CompletionDelta per new token, then the
GenerationOutput, or an EngineError instead. The caller reads them with
`get` (blocking) or `await get_async()`: one queue serves both, so every
entry point of InferenceEngine is built on the same submission. A reader
never hangs: if the engine thread is gone it gets an EngineError.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable

from miniyaie.engine.errors import EngineError

POLL_SECONDS = 1.0  # how often a waiting reader checks that the engine thread still lives


# ANCHOR: sink
class Sink:
    def __init__(self, engine_alive: Callable[[], bool]):
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._engine_alive = engine_alive
        self._ready: asyncio.Event | None = None  # set by the engine thread when an async reader waits
        self._loop: asyncio.AbstractEventLoop | None = None

    def put(self, item: object) -> bool:
        """Hand over an item (engine thread, never blocks); False if the async caller's event loop is gone.

        The item is queued for whichever reader comes. If an async reader has bound the sink
        to its event loop (self._loop, self._ready: see get_async), it is woken: only that
        loop's thread may touch an asyncio.Event, so the engine thread asks the loop to set it.
        A loop that is closed cannot be asked (RuntimeError): nobody will read, return False.
        """
        # Idea: which thread may touch an asyncio.Event, and what if the reader's loop has closed?
        # Stuck? `miniyaie hint 5.13` prints hints, one level at a time.
        # TODO(Task 5.13): From the engine thread to its caller. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 13: From the engine thread to its caller — see book/src/ch05_engine_loop.md')

    def get(self) -> object:
        """The next item for a thread, in the order put; an error item (an exception) is raised.

        Waits as long as the engine thread lives; checks that every POLL_SECONDS
        (self._check_engine raises EngineError once it is gone and nothing is left).
        """
        # Idea: block, but never forever: wake up now and then to ask whether anyone will still put.
        # Stuck? `miniyaie hint 5.13` prints hints, one level at a time.
        # TODO(Task 5.13): From the engine thread to its caller. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 13: From the engine thread to its caller — see book/src/ch05_engine_loop.md')

    async def get_async(self) -> object:
        """The next item for a coroutine, in the order put; an error item is raised.

        The first call binds the sink to the running event loop: it makes self._ready (an
        asyncio.Event that put sets) and then sets self._loop (put reads it). Waiting never
        blocks the event loop (other requests' coroutines run meanwhile), an item put at any
        moment wakes it at once, an idle reader sleeps (it does not spin), and like get it
        checks the engine thread every POLL_SECONDS.
        """
        if self._loop is None:  # the first read binds the sink to the caller's event loop
            self._ready = asyncio.Event()
            self._loop = asyncio.get_running_loop()
        # Idea: never block, spin, lose a put or wait forever: what does the reader sleep on, and in what state?
        # Stuck? `miniyaie hint 5.13` prints hints, one level at a time.
        # TODO(Task 5.13): From the engine thread to its caller. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 13: From the engine thread to its caller — see book/src/ch05_engine_loop.md')

    def _check_engine(self) -> None:
        if not self._engine_alive() and self._items.empty():
            raise EngineError("the engine loop has stopped")


# ANCHOR_END: sink


def _raise_if_error(item: object) -> object:
    if isinstance(item, BaseException):
        raise item
    return item
