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


class Sink:
    def __init__(self, engine_alive: Callable[[], bool]):
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._engine_alive = engine_alive
        self._ready: asyncio.Event | None = None  # set by the engine thread when an async reader waits
        self._loop: asyncio.AbstractEventLoop | None = None

    def put(self, item: object) -> bool:
        """Hand over an item (engine thread); False if the async caller's event loop is gone."""
        self._items.put(item)
        loop = self._loop
        if loop is None:
            return True
        try:
            loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the event loop is closed: nobody will read this request again
            return False
        return True

    def get(self) -> object:
        """The next item for a thread; an error item is raised."""
        while True:
            try:
                return _raise_if_error(self._items.get(timeout=POLL_SECONDS))
            except queue.Empty:
                self._check_engine()

    async def get_async(self) -> object:
        """The next item for a coroutine; an error item is raised."""
        if self._loop is None:  # the first read binds the sink to the caller's event loop
            self._ready = asyncio.Event()
            self._loop = asyncio.get_running_loop()
        while True:
            try:
                return _raise_if_error(self._items.get_nowait())
            except queue.Empty:
                pass
            self._ready.clear()
            if not self._items.empty():  # arrived between the two checks: its wake-up may be cleared
                continue
            try:
                await asyncio.wait_for(self._ready.wait(), timeout=POLL_SECONDS)
            except asyncio.TimeoutError:
                self._check_engine()

    def _check_engine(self) -> None:
        if not self._engine_alive() and self._items.empty():
            raise EngineError("the engine loop has stopped")


def _raise_if_error(item: object) -> object:
    if isinstance(item, BaseException):
        raise item
    return item
