"""Continuous batching by token budget: one rule decides every step.

Each step the scheduler hands out at most `max_num_batched_tokens` tokens.
Running requests are served first (a decode wants one token, an unfinished
prefill its next chunk), then waiting requests are admitted while the budget,
`max_num_seqs` and memory allow. A prefill, a chunk of one, a prefix-cache hit
and a decode are all "the tokens after num_computed_tokens". When a running
request cannot grow, the newest running request is preempted: its memory is
freed, its computed tokens dropped, and it waits at the front of the queue to
be recomputed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from miniyaie.scheduler.memory import KVMemory
from miniyaie.scheduler.policy import POLICIES, PrefixLenOracle
from miniyaie.scheduler.request import FinishReason, Request, RequestStatus


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 512  # the token budget of one step
    max_num_seqs: int = 64  # running requests at most
    policy: str = "fcfs"  # or "lpm"

    def __post_init__(self):
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError("max_num_batched_tokens and max_num_seqs must be at least 1")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose from {sorted(POLICIES)}")


# ANCHOR: batch
@dataclass(frozen=True)
class ScheduledChunk:
    """Tokens [start, start + num_tokens) of one request go through the model this step."""

    request: Request
    start: int  # position of the first token = num_computed_tokens before the step
    num_tokens: int

    @property
    def token_ids(self) -> list[int]:
        return self.request.all_token_ids[self.start : self.start + self.num_tokens]

    @property
    def samples_next_token(self) -> bool:
        """A chunk that reaches the end of the known tokens yields the next token."""
        return self.start + self.num_tokens == self.request.num_tokens


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_batched_tokens(self) -> int:
        return sum(chunk.num_tokens for chunk in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks
# ANCHOR_END: batch


class Scheduler:
    def __init__(self, config: SchedulerConfig, memory: KVMemory, prefix_len: PrefixLenOracle | None = None):
        self.config = config
        self.memory = memory
        self.prefix_len = prefix_len or memory.cached_prefix_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order: the newest is last
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0

    # ------------------------------------------------------------ requests
    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        if request.max_total_tokens > self.memory.capacity_tokens:
            raise ValueError(
                f"request {request.request_id!r} needs up to {request.max_total_tokens} tokens of KV cache; "
                f"the pool holds {self.memory.capacity_tokens}"
            )
        self.requests[request.request_id] = request
        self.waiting.append(request)

    # ANCHOR: abort
    def abort(self, request_id: str) -> Request | None:
        """Cancel a waiting or running request and give back its memory; None if unknown."""
        request = self.requests.get(request_id)
        if request is None or request.is_finished:
            return None
        # Hint: take it out of whichever queue holds it, free its memory and
        # finish it with FinishReason.ABORT (self._finish does the bookkeeping).
        # BEGIN SOLUTION 1.6: Abort
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
        self._finish(request, FinishReason.ABORT)
        # END SOLUTION
        return request
    # ANCHOR_END: abort

    def _finish(self, request: Request, reason: FinishReason) -> None:
        self.memory.free(request)
        request.status, request.finish_reason = RequestStatus.FINISHED, reason
        del self.requests[request.request_id]

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # ------------------------------------------------------------ one step
    # ANCHOR: schedule
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        self._schedule_running(out, budget)
        budget -= out.num_batched_tokens
        if not out.preempted:  # memory is tight: let the running requests drain first
            self._admit_waiting(out, budget)
        return out
    # ANCHOR_END: schedule

    # ANCHOR: schedule_running
    def _schedule_running(self, out: SchedulerOutput, budget: int) -> None:
        """Give each running request, oldest first, its next tokens; preempt the newest to make room."""
        if not self.running:
            return  # nothing to serve yet (so Task 1.2's admission can be tried before this task is done)
        # Hint: walk self.running in order while budget > 0. A request wants
        # num_tokens - num_computed_tokens tokens, capped by the budget. While
        # memory cannot grow it, preempt self.running[-1] (self._preempt); if
        # that was the request itself, stop. Otherwise allocate, append a
        # ScheduledChunk(request, start=num_computed_tokens, num_tokens=n), spend the budget.
        # BEGIN SOLUTION 1.3: Serve running requests within the budget
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            while not self.memory.can_allocate(request, num_new):
                victim = self.running[-1]
                self._preempt(victim, out)
                if victim is request:
                    return
            self.memory.allocate(request, num_new)
            out.chunks.append(ScheduledChunk(request, request.num_computed_tokens, num_new))
            budget -= num_new
            index += 1
        # END SOLUTION
    # ANCHOR_END: schedule_running

    # ANCHOR: preempt
    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        """Preemption by recompute: drop the request's KV cache and queue it first."""
        # Hint: remove it from running, free its memory, set num_computed_tokens
        # to 0 and status PREEMPTED, count it (self.num_preemptions,
        # request.num_preemptions), put it at the FRONT of self.waiting and
        # record it in out.preempted.
        # BEGIN SOLUTION 1.4: Preemption by recompute
        self.running.remove(request)
        self.memory.free(request)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)
        out.preempted.append(request)
        # END SOLUTION
    # ANCHOR_END: preempt

    # ANCHOR: admit_waiting
    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> None:
        """Admit waiting requests in policy order while budget, seats and memory allow."""
        order = POLICIES[self.config.policy](self.waiting, self.prefix_len)
        # Hint: for each request in order, stop when the budget is spent or
        # max_num_seqs requests run. Start from the cached prefix that the
        # memory reports (self.memory.cached_prefix_len(request); the
        # self.prefix_len oracle only orders the queue), but always compute at
        # least the last token (cached <= num_tokens - 1): set
        # num_computed_tokens to it before asking can_allocate, since memory
        # sizes the chunk from there. If memory cannot hold the chunk, put
        # num_computed_tokens back to 0 and stop (no skipping ahead: that
        # would starve long requests). Otherwise allocate, record the hit in
        # request.num_cached_tokens, move the request from waiting to running
        # (status RUNNING) and schedule the chunk.
        # BEGIN SOLUTION 1.2: Admit waiting requests
        for request in order:
            if budget == 0 or len(self.running) >= self.config.max_num_seqs:
                break
            cached = min(self.memory.cached_prefix_len(request), request.num_tokens - 1)
            request.num_computed_tokens = cached
            num_new = min(request.num_tokens - cached, budget)
            if not self.memory.can_allocate(request, num_new):
                request.num_computed_tokens = 0
                break
            self.memory.allocate(request, num_new)
            request.num_cached_tokens = cached
            self.waiting.remove(request)
            self.running.append(request)
            request.status = RequestStatus.RUNNING
            out.chunks.append(ScheduledChunk(request, cached, num_new))
            budget -= num_new
        # END SOLUTION
    # ANCHOR_END: admit_waiting

    # ------------------------------------------------------------ after the model ran
    # ANCHOR: update
    def update(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Record the step's progress and new tokens; returns the requests that finished."""
        finished = []
        for chunk in out.chunks:
            request = chunk.request
            if request.is_finished:  # aborted while the step ran
                continue
            request.num_computed_tokens += chunk.num_tokens
            if not chunk.samples_next_token:
                continue  # a prefill chunk in the middle of the prompt
            token = sampled[request.request_id]
            request.output_token_ids.append(token)
            reason = None
            if token in request.eos_token_ids and not request.ignore_eos:
                reason = FinishReason.STOP
            elif len(request.output_token_ids) >= request.max_tokens:
                reason = FinishReason.LENGTH
            if reason is not None:
                self.running.remove(request)
                self._finish(request, reason)
                finished.append(request)
        return finished
    # ANCHOR_END: update

    def stats(self) -> dict[str, int]:
        return {
            "num_waiting": len(self.waiting),
            "num_running": len(self.running),
            "num_preemptions": self.num_preemptions,
        }
