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
        # Nudge: nobody may wait forever: however the loop ends, every caller still waiting is told.
        # Hint 1: A caller waits on its sink; if the thread just ended, it would wait until its own
        #   poll noticed. So the thread's last act is to tell each one why. When the loop died,
        #   its state is suspect: say so for check_running and /health, and do not ask the engine
        #   for anything more (not even its blocks). When it was closed, it is healthy: give
        #   the blocks back.
        # Hint 2: try: self._loop(). except BaseException as exc: log.critical with exc_info; set
        #   self.error = exc under self._wake; self._end_all(EngineError(f"the engine loop stopped after an
        #   internal error: {describe(exc)}"), abort=False); return. After the try:
        #   self._end_all(EngineError("the engine was closed"), abort=True).
        # Hint 3:
        #   try: self._loop()
        #   except BaseException as exc: log.critical(...); with self._wake: self.error = exc; self._end_all(..., abort=False); return
        #   self._end_all(EngineError("the engine was closed"), abort=True)
        # BEGIN SOLUTION 5.14: The engine thread and its fault boundaries
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 -- recorded, logged and told to every caller below
            log.critical("the engine loop stopped", exc_info=exc)
            with self._wake:
                self.error = exc
            self._end_all(EngineError(f"the engine loop stopped after an internal error: {describe(exc)}"), abort=False)
            return
        self._end_all(EngineError("the engine was closed"), abort=True)
        # END SOLUTION
    # ANCHOR_END: run

    # ANCHOR: guarded
    def _guarded(self, request: RequestState, action: Callable, *args) -> None:
        """Run one request's action (start, abort, on_event); if it raises, that request alone fails.

        The failure is counted in self.failed_requests and logged (a warning
        for an EngineError, which refuses on purpose; an error with the
        traceback otherwise), and the request ends through self._fail.
        Nothing raises out of here: the loop goes on with the other requests.
        """
        # Nudge: the boundary of a fault is one request: catch, count, tell that request, go on.
        # Hint 1: Everything a request does on the engine thread goes through here, so this is
        #   where one request's bug must stop. Catch Exception (not BaseException: a
        #   KeyboardInterrupt must still stop the thread), and hand the request to self._fail,
        #   which returns its blocks and tells its caller.
        # Hint 2: try: action(*args). except Exception as exc: self.failed_requests += 1; log a
        #   warning if isinstance(exc, EngineError) else log.error with exc_info; then
        #   self._fail([request], exc, "the request failed").
        # Hint 3:
        #   try: action(*args)
        #   except Exception as exc:
        #       self.failed_requests += 1; log it; self._fail([request], exc, "the request failed")
        # BEGIN SOLUTION 5.14: The engine thread and its fault boundaries
        try:
            action(*args)
        except Exception as exc:
            self.failed_requests += 1
            if isinstance(exc, EngineError):  # refused on purpose (it says why)
                log.warning("request %s refused: %s", request.request_id, exc)
            else:
                log.error("request %s failed", request.request_id, exc_info=exc)
            self._fail([request], exc, "the request failed")
        # END SOLUTION

    def _fail(self, requests: list[RequestState], exc: Exception, what: str) -> None:
        """End requests with an error: an EngineError as it is, anything else as RequestFailedError("what: ...").

        A caller that hears of its request's failure (self._end) finds the
        request's blocks already given back (self.processor.drop), and the
        error's __cause__ is the original exception. If giving the blocks back
        raises, the engine's state cannot be trusted: that exception goes on up
        (the loop stops, see _run).
        """
        # Nudge: the caller gets an error it can read; the engine gets its blocks back, before anything else.
        # Hint 1: A caller should see a RequestFailedError saying what failed and why, except for
        #   an EngineError, which already says it (refusals, closing). Keep the original as the
        #   cause for the logs. Return the blocks first (self.processor.drop), then tell the
        #   caller (self._end), for each request.
        # Hint 2: error = exc if isinstance(exc, EngineError) else RequestFailedError(f"{what}:
        #   {type(exc).__name__}: {exc}") with __cause__ = exc; for each request: drop, then
        #   self._end(request, error). Do not catch what drop raises.
        # Hint 3:
        #   error = exc if EngineError else RequestFailedError(f"{what}: {type(exc).__name__}: {exc}"); error.__cause__ = exc
        #   for request in requests: self.processor.drop(request); self._end(request, error)
        # BEGIN SOLUTION 5.14: The engine thread and its fault boundaries
        error = exc if isinstance(exc, EngineError) else RequestFailedError(f"{what}: {type(exc).__name__}: {exc}")
        if error is not exc:
            error.__cause__ = exc
        for request in requests:
            self.processor.drop(request)  # its blocks come back; raising here stops the loop (see _run)
            self._end(request, error)
        # END SOLUTION
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
        # Nudge: take everything at once under the lock, then tell each caller outside it, whatever fails.
        # Hint 1: Callers may still be submitting: take the map of requests and the inbox in one go
        #   under the lock, so that none is told twice or missed. The telling happens outside
        #   the lock. One caller's failed cleanup must not leave the others waiting: catch it,
        #   log it, remember that the state is suspect, and go on.
        # Hint 2: Under self._wake: requests = list(self._requests.values()); reset self._requests
        #   and self._inbox. For each request: if abort, try self.processor.drop(request) and on
        #   Exception log.error with exc_info and set self.error = self.error or exc; then
        #   request.sink.put(error).
        # Hint 3:
        #   with self._wake: requests, self._requests, self._inbox = list(self._requests.values()), {}, []
        #   for request in requests:
        #       if abort: try: self.processor.drop(request) except Exception as exc: log; self.error = self.error or exc
        #       request.sink.put(error)
        # BEGIN SOLUTION 5.14: The engine thread and its fault boundaries
        with self._wake:
            requests, self._requests, self._inbox = list(self._requests.values()), {}, []
        for request in requests:
            if abort:
                try:
                    self.processor.drop(request)
                except Exception as exc:  # closing anyway: say so, and still tell the other callers
                    log.error("request %s: returning its blocks failed while closing", request.request_id, exc_info=exc)
                    self.error = self.error or exc
            request.sink.put(error)
        # END SOLUTION
    # ANCHOR_END: end_all


def describe(exc: BaseException) -> str:
    """An exception in one line: its class and its message."""
    return f"{type(exc).__name__}: {exc}"
