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
        # Idea: other threads share the inbox: what if one request of a batch is refused, and from when may abort find them?
        # Stuck? `miniyaie hint 5.14` prints hints, one level at a time.
        # TODO(Task 5.14): The engine thread and its fault boundaries. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 14: The engine thread and its fault boundaries — see book/src/ch05_engine_loop.md')

    def abort(self, request_id: str) -> bool:
        """Queue an abort (any thread); True if the request was in flight. Its caller gets finish_reason "abort".

        The abort names the request itself, not its id: if that request ends and a new one takes
        its id before the loop gets to the abort, the new one is not touched.
        """
        # Idea: an id can be reused; an abort must stay with the request it was meant for.
        # Stuck? `miniyaie hint 5.14` prints hints, one level at a time.
        # TODO(Task 5.14): The engine thread and its fault boundaries. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 14: The engine thread and its fault boundaries — see book/src/ch05_engine_loop.md')
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
        # Idea: the loop may be asleep: set the flag where it looks, wake it, and wait for it to finish.
        # Stuck? `miniyaie hint 5.14` prints hints, one level at a time.
        # TODO(Task 5.14): The engine thread and its fault boundaries. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 14: The engine thread and its fault boundaries — see book/src/ch05_engine_loop.md')

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
        # Idea: a caller must learn why it cannot be served, not wait for an answer that never comes.
        # Stuck? `miniyaie hint 5.14` prints hints, one level at a time.
        # TODO(Task 5.14): The engine thread and its fault boundaries. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 14: The engine thread and its fault boundaries — see book/src/ch05_engine_loop.md')
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
        # Idea: a caller must never wait for a model step: what may the lock cover, and what not?
        # Stuck? `miniyaie hint 5.14` prints hints, one level at a time.
        # TODO(Task 5.14): The engine thread and its fault boundaries. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 14: The engine thread and its fault boundaries — see book/src/ch05_engine_loop.md')

    def _step(self) -> None:
        """One engine step; its token events go to their requests. A step that raises fails the requests it ran.

        The requests failed are those in flight that had started (they have
        completions) when the step ran, not those queued during it; their
        blocks come back (self._fail), the failure is logged as an error with
        its traceback, counted in self.failed_steps, and the loop goes on. An
        event whose request has ended meanwhile (aborted, failed) is dropped.
        self.busy_seconds adds up the time of the steps that ran.
        """
        # Idea: a failed step is the engine's fault, not the caller's: fail what it touched, keep serving.
        # Stuck? `miniyaie hint 5.14` prints hints, one level at a time.
        # TODO(Task 5.14): The engine thread and its fault boundaries. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 14: The engine thread and its fault boundaries — see book/src/ch05_engine_loop.md')
    # ANCHOR_END: loop

    def _in_flight(self) -> list[RequestState]:
        with self._wake:
            return list(self._requests.values())

    def _still_in_flight(self, request: RequestState) -> bool:
        with self._wake:
            return self._requests.get(request.request_id) is request
