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
        # Nudge: which thread may touch an asyncio.Event, and what if the reader's loop has closed?
        # Hint 1: A thread reader blocks on the queue itself: queuing is enough. An async reader
        #   sleeps on an asyncio.Event, which belongs to its event loop; setting it from another
        #   thread is a race. The loop has a thread-safe door for that: ask it to run the set.
        #   Read self._loop once: the reader may bind it between two reads.
        # Hint 2: Put the item in self._items. Take self._loop into a local; if it is None return
        #   True. Else call loop.call_soon_threadsafe(self._ready.set); if that raises
        #   RuntimeError (a closed loop) return False; else True.
        # Hint 3:
        #   self._items.put(item); loop = self._loop
        #   if loop is None: return True
        #   try: loop.call_soon_threadsafe(self._ready.set)
        #   except RuntimeError: return False
        #   return True
        # BEGIN SOLUTION 5.13: From the engine thread to its caller
        self._items.put(item)
        loop = self._loop
        if loop is None:
            return True
        try:
            loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the event loop is closed: nobody will read this request again
            return False
        return True
        # END SOLUTION

    def get(self) -> object:
        """The next item for a thread, in the order put; an error item (an exception) is raised.

        Waits as long as the engine thread lives; checks that every POLL_SECONDS
        (self._check_engine raises EngineError once it is gone and nothing is left).
        """
        # Nudge: block, but never forever: wake up now and then to ask whether anyone will still put.
        # Hint 1: A thread may block (it has nothing else to do), but an engine thread that died
        #   without a word would leave it blocked for good. So wait with a timeout, and each time
        #   it runs out check the engine (self._check_engine raises once it is gone and nothing
        #   is left to read). An item that is an exception is the request's error: raise it.
        # Hint 2: Loop: try to get an item with timeout=POLL_SECONDS and return it through
        #   _raise_if_error; on queue.Empty, call self._check_engine() and loop again.
        # Hint 3:
        #   while True:
        #       try: return _raise_if_error(self._items.get(timeout=POLL_SECONDS))
        #       except queue.Empty: self._check_engine()
        # BEGIN SOLUTION 5.13: From the engine thread to its caller
        while True:
            try:
                return _raise_if_error(self._items.get(timeout=POLL_SECONDS))
            except queue.Empty:
                self._check_engine()
        # END SOLUTION

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
        # Nudge: never block, spin, lose a put or wait forever: what does the reader sleep on, and in what state?
        # Hint 1: A blocking queue.get would freeze every coroutine of the server, so take items
        #   without waiting, and when there is none, sleep on self._ready, which put sets through
        #   the loop (call_soon_threadsafe runs the set on this loop's thread, after you went to
        #   sleep, so no wake-up is lost). Clear the event before sleeping: once set it stays
        #   set, and an event left set from an item already taken would make the next wait
        #   return at once, over and over (a reader that spins while idle). The sleep has a
        #   timeout: the engine thread may die without a word, and a reader must not wait forever.
        # Hint 2: Loop: try get_nowait and return the item through _raise_if_error; on queue.Empty,
        #   clear self._ready and wait for it with a timeout of POLL_SECONDS (asyncio.wait_for);
        #   on timeout, self._check_engine() (it raises when the engine is gone and nothing is
        #   left); then loop.
        # Hint 3:
        #   while True:
        #       try: return _raise_if_error(self._items.get_nowait())
        #       except queue.Empty: pass
        #       self._ready.clear()
        #       try: await asyncio.wait_for(self._ready.wait(), timeout=POLL_SECONDS)
        #       except asyncio.TimeoutError: self._check_engine()
        # BEGIN SOLUTION 5.13: From the engine thread to its caller
        while True:
            try:
                return _raise_if_error(self._items.get_nowait())
            except queue.Empty:
                pass
            self._ready.clear()  # put's set runs on this loop after we sleep: an item put now still wakes us
            try:
                await asyncio.wait_for(self._ready.wait(), timeout=POLL_SECONDS)
            except asyncio.TimeoutError:
                self._check_engine()
        # END SOLUTION

    def _check_engine(self) -> None:
        if not self._engine_alive() and self._items.empty():
            raise EngineError("the engine loop has stopped")


# ANCHOR_END: sink


def _raise_if_error(item: object) -> object:
    if isinstance(item, BaseException):
        raise item
    return item
