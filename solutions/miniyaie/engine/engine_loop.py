"""The engine thread: the only code that touches the LLMEngine, fed by an inbox, failing one request at a time.

    caller ── submit / abort ──> inbox ──> loop thread: LLMEngine.step() ─┐
       ^                                                                   │ token events
       └──── deltas / result / error <── sink <── OutputProcessor <────────┘

Callers never call `step`: they put requests and aborts in the inbox (any
thread), and the loop applies them between two steps. The loop sleeps on a
condition variable while there is nothing to do, so an idle engine costs
nothing. Faults stay as small as they can:

- a fault in one request (its detokenizer, its stop strings, its caller)
  ends that request with RequestFailedError and returns its blocks; the
  other requests go on;
- a step that raises fails the requests in the engine (their blocks come
  back) and the loop goes on;
- a fault while recovering from one of these means the engine's state can
  no longer be trusted: the loop stops, tells every caller, and says so in
  `alive` / `error` (the server's /health then answers 503).
"""

from __future__ import annotations

import logging
import threading
import time

from miniyaie.engine.errors import EngineError, InvalidRequestError
from miniyaie.engine.fault_boundary import FaultBoundary, describe
from miniyaie.engine.llm_engine import LLMEngine
from miniyaie.engine.request_state import OutputProcessor, RequestState
from miniyaie.engine.plugins import SPECULATIVE, available, plugin

log = logging.getLogger("miniyaie.engine")


class EngineLoop(FaultBoundary):
    def __init__(self, llm: LLMEngine, tokenizer, eos_token_ids: list[int]):
        self.llm = llm
        self.processor = OutputProcessor(llm, tokenizer, eos_token_ids, self._tell)
        self._wake = threading.Condition()  # guards everything below that callers touch
        self._inbox: list[tuple[str, object]] = []
        self._requests: dict[str, RequestState] = {}  # in flight, by request id: submitted and not ended
        self._closed = False
        self.error: BaseException | None = None  # what stopped the loop, if it died
        self.busy_seconds = 0.0
        self.failed_steps = 0
        self.failed_requests = 0
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="miniyaie-engine", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- any thread
    # ANCHOR: inbox
    def submit(self, requests: list[RequestState]) -> None:
        """Queue requests for the next step, all or none (any thread; never waits for a step).

        Raises EngineError if the loop is closed or has stopped (check_running), and
        InvalidRequestError, naming the id, if a request's id is already in flight or appears
        twice in `requests`; then nothing is queued. Otherwise the requests are in flight
        (in_flight counts them, abort finds them) from this moment, and the loop is woken.
        """
        # Nudge: other threads share the inbox: what if one request of a batch is refused, and from when may abort find them?
        # Hint 1: Callers run on other threads than the loop, so the inbox and the map of requests
        #   in flight are changed only under self._wake (a Condition: its lock, and the way to
        #   wake the loop). Nothing slow happens under it: the loop applies the inbox later.
        #   All or none: refuse before changing anything. A request is in flight from the
        #   moment it is queued, so an abort that follows at once finds it.
        # Hint 2: With self._wake held: self.check_running(); the ids; refuse an id already in
        #   self._requests, and a batch whose ids repeat (InvalidRequestError). Record the
        #   requests by id in self._requests, append ("submit", requests) to self._inbox, and
        #   notify the condition.
        # Hint 3:
        #   with self._wake:
        #       self.check_running(); ids = [r.request_id for r in requests]
        #       taken in self._requests -> InvalidRequestError(f"request id {id!r} is already in use")
        #       an id repeated in ids -> InvalidRequestError(f"request id {id!r} appears twice in one submission")
        #       self._requests.update(zip(ids, requests)); self._inbox.append(("submit", requests)); self._wake.notify()
        # BEGIN SOLUTION 5.14: The engine thread and its fault boundaries
        with self._wake:
            self.check_running()
            ids = [r.request_id for r in requests]
            taken = [rid for rid in ids if rid in self._requests]
            if taken:
                raise InvalidRequestError(f"request id {taken[0]!r} is already in use")
            twice = [rid for i, rid in enumerate(ids) if rid in ids[:i]]
            if twice:
                raise InvalidRequestError(f"request id {twice[0]!r} appears twice in one submission")
            self._requests.update(zip(ids, requests))
            self._inbox.append(("submit", requests))
            self._wake.notify()
        # END SOLUTION

    def abort(self, request_id: str) -> bool:
        """Queue an abort (any thread); True if the request was in flight. Its caller gets finish_reason "abort".

        The abort names the request itself, not its id: if that request ends and a new one takes
        its id before the loop gets to the abort, the new one is not touched.
        """
        # Nudge: an id can be reused; an abort must stay with the request it was meant for.
        # Hint 1: The loop applies the inbox later, between two steps. By then the request may have
        #   finished and a caller may have submitted a new request with the same id: an abort
        #   queued by id would end the wrong one. Queue the RequestState object instead (the
        #   loop aborts it only if that very object is still in flight).
        # Hint 2: Under self._wake, look the id up in self._requests; when found, append ("abort",
        #   request) to the inbox and notify. Return whether it was found.
        # Hint 3:
        #   with self._wake:
        #       request = self._requests.get(request_id)
        #       if request is not None: self._inbox.append(("abort", request)); self._wake.notify()
        #   return request is not None
        # BEGIN SOLUTION 5.14: The engine thread and its fault boundaries
        with self._wake:
            request = self._requests.get(request_id)
            if request is not None:
                self._inbox.append(("abort", request))  # the request itself: a later one may reuse its id
                self._wake.notify()
        return request is not None
        # END SOLUTION
    # ANCHOR_END: inbox

    @property
    def alive(self) -> bool:
        """The thread runs and has not failed (False once closed)."""
        return self._thread.is_alive() and self.error is None

    @property
    def in_flight(self) -> int:
        with self._wake:
            return len(self._requests)

    # ANCHOR: lifetime
    def close(self) -> None:
        """Stop the thread (any thread but the loop's own) and wait until it has ended; requests still
        in flight end with an EngineError (see _run). Closing twice is harmless."""
        # Nudge: the loop may be asleep: set the flag where it looks, wake it, and wait for it to finish.
        # Hint 1: The loop sleeps on the condition while there is no work, so a flag alone would be
        #   seen only at the next submission. Set it under the lock and notify, then join the
        #   thread: close returns only when every caller has been told.
        # Hint 2: Under self._wake: self._closed = True and notify. Then self._thread.join().
        # Hint 3:
        #   with self._wake: self._closed = True; self._wake.notify()
        #   self._thread.join()
        # BEGIN SOLUTION 5.14: The engine thread and its fault boundaries
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()
        # END SOLUTION

    def stats(self) -> dict:
        """The engine's counters (InferenceEngine.get_stats; the book, chapter 5, explains each one)."""
        c = self.llm.stats
        prompt_tokens, returned = c["prompt_tokens"], self.processor.returned_tokens  # the tokens callers got
        return {
            "requests": {"waiting": c["num_waiting"], "running": c["num_running"], "in_flight": self.in_flight,
                         "finished": c["finished_requests"], "failed": self.failed_requests},
            "tokens": {"prompt": prompt_tokens, "output": returned, "computed": c["computed_tokens"],
                       "cached_prompt": c["cached_tokens"]},
            "prefix_cache_hit_rate": c["cached_tokens"] / prompt_tokens if prompt_tokens else 0.0,
            "kv_blocks": {"used": c["used_blocks"], "held_by_requests": c["request_blocks"],
                          "cache_only": c["used_blocks"] - c["request_blocks"], "total": self.llm.memory.num_blocks, "max_used": c["max_used_blocks"],
                          "block_size": self.llm.memory.block_size, "dtype": str(self.llm.pool.k.dtype).removeprefix("torch."),
                          "tokens": self.llm.memory.num_blocks * self.llm.memory.block_size},
            "preemptions": c["num_preemptions"],
            "forked_requests": c["forked_requests"],
            "speculative": plugin(SPECULATIVE).speculative_stats(self.llm.config.speculative, c) if available(SPECULATIVE) else {},
            "lora": self.llm.lora.stats() if self.llm.lora is not None else {},  # chapter 11's adapters
            "steps": c["steps"],
            "overlapped_steps": c["overlapped_steps"],  # launched before the step before was recorded (backends/overlap.py)
            "failed_steps": self.failed_steps,
            "loop_alive": self.alive,
            "loop_error": None if self.error is None else describe(self.error),
            "busy_seconds": self.busy_seconds,
            "uptime_seconds": time.monotonic() - self._started,
            "output_tokens_per_second": returned / self.busy_seconds if self.busy_seconds else 0.0,
        }

    def check_running(self) -> None:
        """Raise EngineError if the loop was closed ("the engine is closed") or has stopped ("the engine
        loop has stopped after an internal error: ...", naming describe(self.error))."""
        # Nudge: a caller must learn why it cannot be served, not wait for an answer that never comes.
        # Hint 1: Two reasons, each with its own message: closed on purpose, or dead after an error
        #   (recorded in self.error by _run). Closed is checked first. /health and every submit
        #   rely on this.
        # Hint 2: If self._closed: raise EngineError("the engine is closed"). Elif self.error is not
        #   None: raise EngineError(f"the engine loop has stopped after an internal error:
        #   {describe(self.error)}").
        # Hint 3:
        #   if self._closed: raise EngineError("the engine is closed")
        #   if self.error is not None: raise EngineError(f"... {describe(self.error)}")
        # BEGIN SOLUTION 5.14: The engine thread and its fault boundaries
        if self._closed:
            raise EngineError("the engine is closed")
        if self.error is not None:
            raise EngineError(f"the engine loop has stopped after an internal error: {describe(self.error)}")
        # END SOLUTION
    # ANCHOR_END: lifetime

    # ---------------------------------------------------------------- the loop thread

    # ANCHOR: loop
    def _loop(self) -> None:
        """The engine thread's whole work until it is closed: the callers' submissions and aborts, and the steps.

        Runs on the engine thread only. It never spins: while the inbox is
        empty, the loop is open and the engine has nothing unfinished, it
        waits on self._wake; it returns as soon as it is closed. The inbox's
        actions take effect in the order they arrived: a submission starts
        its requests (self.processor.start); an abort ends its request
        (self.processor.abort) only if that very request is still in flight
        (it may have ended, and a later request may reuse its id). Each
        action runs through self._guarded, so a fault ends only its request.
        While the engine has work, it steps (self._step).
        """
        # Nudge: a caller must never wait for a model step: what may the lock cover, and what not?
        # Hint 1: Callers append to self._inbox and notify self._wake from their threads; this
        #   thread is the only one that touches the engine. Hold the lock only to wait and to
        #   swap the inbox for an empty list: a caller must never wait for a model step. Order
        #   matters: a request submitted and then aborted must be started before it is aborted.
        # Hint 2: Forever: with self._wake, wait while the inbox is empty, the loop not closed and
        #   self.llm.has_unfinished() is False; return if closed; take the inbox. Then for each
        #   (kind, payload): "submit" -> self._guarded(request, self.processor.start, request) for
        #   each request of the payload; "abort" -> if self._still_in_flight(payload), guarded
        #   self.processor.abort. Finally, if self.llm.has_unfinished(), self._step().
        # Hint 3:
        #   while True:
        #       with self._wake:
        #           while not (self._inbox or self._closed or self.llm.has_unfinished()): self._wake.wait()
        #           if self._closed: return
        #           inbox, self._inbox = self._inbox, []
        #       for kind, payload in inbox: submit -> guarded start of each; abort -> guarded abort if still in flight
        #       if self.llm.has_unfinished(): self._step()
        # BEGIN SOLUTION 5.14: The engine thread and its fault boundaries
        while True:
            with self._wake:
                while not (self._inbox or self._closed or self.llm.has_unfinished()):
                    self._wake.wait()  # sleeps until submit/abort/close notifies
                if self._closed:
                    return
                inbox, self._inbox = self._inbox, []
            for kind, payload in inbox:  # submissions and aborts, in the order they came
                if kind == "submit":
                    for request in payload:
                        self._guarded(request, self.processor.start, request)
                elif self._still_in_flight(payload):  # it may have ended since the abort was asked
                    self._guarded(payload, self.processor.abort, payload)
            if self.llm.has_unfinished():
                self._step()
        # END SOLUTION

    def _step(self) -> None:
        """One engine step; its token events go to their requests. A step that raises fails the requests it ran.

        The requests failed are those in flight that had started (they have
        completions) when the step ran, not those queued during it; their
        blocks come back (self._fail), the failure is logged as an error with
        its traceback, counted in self.failed_steps, and the loop goes on. An
        event whose request has ended meanwhile (aborted, failed) is dropped.
        self.busy_seconds adds up the time of the steps that ran.
        """
        # Nudge: a failed step is the engine's fault, not the caller's: fail what it touched, keep serving.
        # Hint 1: self.llm.step() returns the step's token events; each goes to its request's
        #   processor.on_event, guarded (a fault in one request's detokenizer or stop strings
        #   ends that request only). If the step itself raises, count it, fail the requests
        #   that were in the engine (self._fail) and return: the loop must survive it.
        # Hint 2: Time the step into self.busy_seconds. try: events = self.llm.step(); except
        #   Exception: self.failed_steps += 1, log it, fail [r for r in self._in_flight() if
        #   r.completions] with self._fail(..., exc, "the engine step failed"), return. Then for
        #   each event: request = self.processor.request_of(event.request_id); if not None,
        #   self._guarded(request, self.processor.on_event, event).
        # Hint 3:
        #   started = perf_counter()
        #   try: events = self.llm.step()
        #   except Exception as exc: failed_steps += 1; self._fail(started requests, exc, "the engine step failed"); return
        #   busy_seconds += perf_counter() - started
        #   for event in events: request = processor.request_of(id); if request: self._guarded(request, processor.on_event, event)
        # BEGIN SOLUTION 5.14: The engine thread and its fault boundaries
        started = time.perf_counter()
        try:
            events = self.llm.step()
        except Exception as exc:  # the step failed: fail the requests in the engine, keep serving
            self.failed_steps += 1
            log.error("engine step failed; failing the requests in the engine", exc_info=exc)
            started = [r for r in self._in_flight() if r.completions]  # not those queued during the step
            self._fail(started, exc, "the engine step failed")
            return
        self.busy_seconds += time.perf_counter() - started
        for event in events:
            request = self.processor.request_of(event.request_id)
            if request is not None:  # None: it ended while the step ran (aborted, or failed)
                self._guarded(request, self.processor.on_event, event)
        # END SOLUTION
    # ANCHOR_END: loop

    def _in_flight(self) -> list[RequestState]:
        with self._wake:
            return list(self._requests.values())

    def _still_in_flight(self, request: RequestState) -> bool:
        with self._wake:
            return self._requests.get(request.request_id) is request
