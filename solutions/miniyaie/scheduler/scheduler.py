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
    # Admission headroom (SGLang's new-token ratio, vLLM's watermark): admit a request only if the
    # memory could still hold the prompts being prefilled and this fraction of the output tokens every
    # running request (and this one) may yet produce. 0 = admit as soon as the chunk fits (chapter 1's
    # rule); 1 = never preempt.
    decode_reserve: float = 0.0
    # LPM sorts the whole queue by prefix match every step; past this queue length use FCFS (SGLang: 128).
    lpm_max_queue: int = 128
    # LPM may pass a request over; after this many schedules in the queue it goes first (no starvation).
    max_wait_steps: int = 256
    # With a prefix cache: hold a request whose prompt shares a block more than its cached prefix with a
    # request being prefilled, until that prefix is cached (SGLang's in-batch prefix check).
    hold_shared_prefix: bool = False

    def __post_init__(self):
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError("max_num_batched_tokens and max_num_seqs must be at least 1")
        if not 0 <= self.decode_reserve <= 1:
            raise ValueError(f"decode_reserve must be in [0, 1], got {self.decode_reserve}")
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
        self.num_schedules = 0
        self.num_held_for_prefix = 0  # admissions put off to reuse a prefix being computed (a counter)
        self._queued_at: dict[str, int] = {}  # request id -> num_schedules when it was added

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
        self._queued_at[request.request_id] = self.num_schedules
        self.waiting.append(request)

    def add_forked(self, request: Request) -> None:
        """Seat a request that starts out running on blocks the memory already gave it.

        A completion forked from a running request (n > 1) shares its
        parent's prompt blocks and has nothing to prefill: it skips the queue
        and admission and joins the running batch as it is.
        """
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        request.status = RequestStatus.RUNNING
        self.requests[request.request_id] = request
        self.running.append(request)

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
        self._queued_at.pop(request.request_id, None)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # ------------------------------------------------------------ one step
    # ANCHOR: schedule
    def schedule(self) -> SchedulerOutput:
        self.num_schedules += 1
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
        order = self._admission_order()
        # Hint: for each request in order, stop when the budget is spent or
        # max_num_seqs requests run. Start from the cached prefix that the
        # memory reports (self.memory.cached_prefix_len(request); the
        # self.prefix_len oracle only orders the queue), but always compute at
        # least the last token (cached <= num_tokens - 1): set
        # num_computed_tokens to it before asking whether it fits, since memory
        # sizes the chunk from there. If the chunk does not fit while keeping
        # the decode reserve (self._fits_with_reserve(request, num_new)), put
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
            if not self._fits_with_reserve(request, num_new):
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

    def _fits_with_reserve(self, request: Request, num_new: int) -> bool:
        """Memory holds the chunk and still keeps `decode_reserve` of the outputs still to come.

        Asked as "could this request grow by num_new + reserve tokens": the
        same question with the reserve added, so every KVMemory answers it.
        """
        ratio = self.config.decode_reserve
        if ratio == 0:
            return self.memory.can_allocate(request, num_new)
        # prompt tokens still to prefill will surely be needed; outputs only up to max_tokens, so reserve a fraction
        prompts = sum(max(0, len(r.prompt_token_ids) - r.num_computed_tokens) for r in self.running)
        prompts += max(0, len(request.prompt_token_ids) - request.num_computed_tokens - num_new)
        outputs = sum(r.max_tokens - len(r.output_token_ids) for r in self.running) + request.max_tokens
        return self.memory.can_allocate(request, num_new + prompts + int(ratio * outputs))

    def _admission_order(self):
        """The policy's order (FCFS past `lpm_max_queue`), requests waiting too long first, and
        with `hold_shared_prefix` the requests that should wait for a prefix being computed left out."""
        policy = self.config.policy if len(self.waiting) <= self.config.lpm_max_queue else "fcfs"
        order = POLICIES[policy](self.waiting, self.prefix_len)
        if policy != "fcfs":
            limit = self.num_schedules - self.config.max_wait_steps
            queued_at = lambda r: self._queued_at.get(r.request_id, self.num_schedules)  # noqa: E731 (forked: now)
            overdue = [r for r in self.waiting if queued_at(r) <= limit]
            if overdue:
                order = overdue + [r for r in order if queued_at(r) > limit]
        if not self.config.hold_shared_prefix:
            return order
        return self._without_requests_sharing_a_prefix_in_flight(order)

    def _without_requests_sharing_a_prefix_in_flight(self, order):
        """Yield `order` minus requests that would recompute a prefix another request is computing now.

        A leader is a running request still in its prompt, or one yielded
        before (admitted this step). A request is held when its prompt
        shares with a leader's a whole block beyond what the cache already
        holds for it: once the leader's prefill is done the blocks are cached
        and the request starts after them.
        """
        block = getattr(self.memory, "block_size", 1)
        leaders = [r.prompt_token_ids for r in self.running if r.num_computed_tokens < len(r.prompt_token_ids)]
        for request in order:
            prompt = request.prompt_token_ids
            want = min(self.prefix_len(request), len(prompt) - 1) // block * block + block
            if want < len(prompt) and any(leader[:want] == prompt[:want] for leader in leaders):
                self.num_held_for_prefix += 1
                continue
            leaders.append(prompt)
            yield request

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
            "num_held_for_prefix": self.num_held_for_prefix,
        }
