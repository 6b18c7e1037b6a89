"""Where a fault stops on the engine thread: one request's fault ends that request alone.

Mixed into EngineLoop (engine_loop.py). `_run` is the thread's outermost
boundary: however the loop ends, every caller is told. Every action of
one request goes through `_guarded`; `_fail` ends requests with an error their caller can
read, after giving their blocks back; `_tell`/`_end` hand a caller its
items, and a caller who went away has its request dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from miniyaie.engine.errors import EngineError, RequestFailedError
from miniyaie.engine.outputs import GenerationOutput
from miniyaie.engine.request_state import RequestState

log = logging.getLogger("miniyaie.engine")


class FaultBoundary:
    """Needs self._loop, self.processor, self._wake, self._requests, self._inbox, self.failed_requests, self.error."""

    # ANCHOR: run
    def _run(self) -> None:
        """The thread's whole life: the loop, then the end of every request still in flight.

        If self._loop raises anything (BaseException: the loop cannot go on), it is logged as
        critical, recorded as self.error (under the lock: `alive` and check_running read it)
        and every request in flight ends with EngineError("the engine loop stopped after an
        internal error: ...", naming describe(exc)) without giving back blocks (the engine's
        state can no longer be trusted: touching it could raise again). If the loop returns
        (it was closed), every request in flight ends with EngineError("the engine was closed")
        and its blocks come back (self._end_all(error, abort)).
        """
        # Idea: nobody may wait forever: however the loop ends, every caller still waiting is told.
        # Stuck? `miniyaie hint 5.14` prints hints, one level at a time.
        # TODO(Task 5.14): The engine thread and its fault boundaries. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 14: The engine thread and its fault boundaries — see book/src/ch05_engine_loop.md')
    # ANCHOR_END: run

    # ANCHOR: guarded
    def _guarded(self, request: RequestState, action: Callable, *args) -> None:
        """Run one request's action (start, abort, on_event); if it raises, that request alone fails.

        The failure is counted in self.failed_requests and logged (a warning
        for an EngineError, which refuses on purpose; an error with the
        traceback otherwise), and the request ends through self._fail.
        Nothing raises out of here: the loop goes on with the other requests.
        """
        # Idea: the boundary of a fault is one request: catch, count, tell that request, go on.
        # Stuck? `miniyaie hint 5.14` prints hints, one level at a time.
        # TODO(Task 5.14): The engine thread and its fault boundaries. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 14: The engine thread and its fault boundaries — see book/src/ch05_engine_loop.md')

    def _fail(self, requests: list[RequestState], exc: Exception, what: str) -> None:
        """End requests with an error: an EngineError as it is, anything else as RequestFailedError("what: ...").

        A caller that hears of its request's failure (self._end) finds the
        request's blocks already given back (self.processor.drop), and the
        error's __cause__ is the original exception. If giving the blocks back
        raises, the engine's state cannot be trusted: that exception goes on up
        (the loop stops, see _run).
        """
        # Idea: the caller gets an error it can read; the engine gets its blocks back, before anything else.
        # Stuck? `miniyaie hint 5.14` prints hints, one level at a time.
        # TODO(Task 5.14): The engine thread and its fault boundaries. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 14: The engine thread and its fault boundaries — see book/src/ch05_engine_loop.md')
    # ANCHOR_END: guarded

    def _tell(self, request: RequestState, item: object) -> None:
        """Give a request's caller a delta or its result (the result ends the request)."""
        if isinstance(item, GenerationOutput):
            self._end(request, item)
        elif not request.sink.put(item):
            self._caller_gone(request)

    def _end(self, request: RequestState, last: object) -> None:
        with self._wake:
            self._requests.pop(request.request_id, None)
        if not request.sink.put(last):
            self._caller_gone(request)

    def _caller_gone(self, request: RequestState) -> None:
        log.warning("request %s: its caller went away; aborting it", request.request_id)
        self.processor.drop(request)
        with self._wake:
            self._requests.pop(request.request_id, None)

    # ANCHOR: end_all
    def _end_all(self, error: EngineError, abort: bool) -> None:
        """Tell every request in flight (queued ones too) that it ended with `error`; with `abort`, first
        give back each one's blocks (self.processor.drop).

        The requests and the inbox are taken, emptied, under the lock: after this nothing is in
        flight. A drop that raises is logged, recorded as self.error (if none is recorded yet)
        and does not keep the other callers from being told.
        """
        # Idea: take everything at once under the lock, then tell each caller outside it, whatever fails.
        # Stuck? `miniyaie hint 5.14` prints hints, one level at a time.
        # TODO(Task 5.14): The engine thread and its fault boundaries. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 14: The engine thread and its fault boundaries — see book/src/ch05_engine_loop.md')
    # ANCHOR_END: end_all


def describe(exc: BaseException) -> str:
    """An exception in one line: its class and its message."""
    return f"{type(exc).__name__}: {exc}"
