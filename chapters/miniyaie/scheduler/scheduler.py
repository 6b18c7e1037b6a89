"""Continuous batching by token budget: one rule decides every step.

Each step hands out at most `max_num_batched_tokens` tokens, running requests
first, then admissions while the budget, `max_num_seqs` and memory allow. A
prefill, a chunk of one, a prefix-cache hit and a decode are all "the tokens
after num_computed_tokens"; a request preempted for memory is recomputed.
"""

from __future__ import annotations

from collections import deque

from miniyaie.scheduler.long_prefill import LongPrefillBound
from miniyaie.scheduler.memory import KVMemory
from miniyaie.scheduler.policy import PrefixLenOracle, SchedulerConfig, admission_order, fits_with_reserve, hold_shared_prefixes
from miniyaie.scheduler.request import FinishReason, Request, RequestStatus
from miniyaie.scheduler.step import ScheduledChunk, SchedulerOutput


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
        self.long_prefills = LongPrefillBound(config.long_prefill_token_threshold, config.max_long_partial_prefills)
        self._queued_at: dict[str, int] = {}  # request id -> num_schedules when it was added

    # ------------------------------------------------------------ requests
    # ANCHOR: add_request
    def add_request(self, request: Request) -> None:
        """Queue a new request at the back of `waiting`.

        Raises ValueError, queueing nothing, with a message naming the
        request id, when the id is in use by an unfinished request, or when
        the request could never run: its max_total_tokens (prompt +
        max_tokens) is more than memory.capacity_tokens. Admission never
        skips a request, so one that can never fit would block the queue
        for good: it is refused at once instead.
        """
        # Idea: refuse up front what could never run, or it would block the queue forever.
        # Stuck? `miniyaie hint 1.2` prints hints, one level at a time.
        # TODO(Task 1.2): Admit waiting requests. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 2: Admit waiting requests — see book/src/ch01_scheduler.md')
        self.requests[request.request_id] = request
        self._queued_at[request.request_id] = self.num_schedules
        self.waiting.append(request)
    # ANCHOR_END: add_request

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
        """Cancel a waiting or running request and give back its memory.

        Returns the request, now finished with FinishReason.ABORT and in
        neither queue; None for an id that is unknown or already finished.
        """
        # Idea: a request is in exactly one queue; take it out and finish it.
        # Stuck? `miniyaie hint 1.5` prints hints, one level at a time.
        # TODO(Task 1.5): A request leaves early: preemption and abort. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 5: A request leaves early: preemption and abort — see book/src/ch01_scheduler.md')
    # ANCHOR_END: abort

    # ANCHOR: finish
    def _finish(self, request: Request, reason: FinishReason) -> None:
        """End a request that is in neither queue any more. Afterwards it holds no memory, it is
        FINISHED with `reason` as its finish_reason, and it is no longer in self.requests (which
        holds unfinished requests only): its id is free for add_request and add_forked."""
        # Idea: a finished request holds nothing and is known by nobody.
        # Stuck? `miniyaie hint 1.3` prints hints, one level at a time.
        # TODO(Task 1.3): Record a step's results. Replace this line with your code.
        raise NotImplementedError("Chapter 1, Task 3: Record a step's results — see book/src/ch01_scheduler.md")
        self._queued_at.pop(request.request_id, None)
    # ANCHOR_END: finish

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # ------------------------------------------------------------ one step
    # ANCHOR: schedule
    def schedule(self) -> SchedulerOutput:
        """Decide one step: which requests compute which tokens, at most max_num_batched_tokens in all.

        Serving the running requests is _schedule_running's job (Task 1.4),
        admitting waiting ones _admit_waiting's; this method shares the budget
        between them so that a running request is never passed over for a
        waiting one, and a step that preempted admits nobody (memory is tight:
        the running requests drain first). Whenever admission runs,
        num_schedules counts the schedules so far, this one included. Example
        (asserted): budget 4, a decoding and b waiting with a 3-token prompt:
        a gets 1 token, then b 3.
        """
        self.long_prefills.start_step()
        # Idea: one budget, two kinds of request: which is served first, and when does the other get nothing?
        # Stuck? `miniyaie hint 1.2` prints hints, one level at a time.
        # TODO(Task 1.2): Admit waiting requests. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 2: Admit waiting requests — see book/src/ch01_scheduler.md')
    # ANCHOR_END: schedule

    # ANCHOR: schedule_running
    def _schedule_running(self, out: SchedulerOutput, budget: int) -> None:
        """Schedule the running requests' next chunks into `out`, at most `budget` tokens in all.

        A request's chunk is the tokens after its num_computed_tokens, as many
        as self.long_prefills.tokens_for(request, budget left) grants; no
        chunk is empty, and every chunk is allocated in memory. Older
        requests (earlier in self.running) come first: a request gets
        tokens only if every older one that wanted some got its grant. When
        memory cannot hold every chunk, requests are preempted
        (self._preempt), and afterwards the preempted ones are the newest
        that were running, and none newer than a preempted one gets tokens.
        Example (asserted): a, b and c decode and the memory lets only a
        grow: c is preempted, then b, and a gets its token. The admission
        reserve (decode_reserve) is not asked of running requests, or they could never finish.
        """
        if not self.running:
            return  # nothing to serve yet (so Task 1.2's admission can be tried before this task is done)
        # Idea: oldest first within the budget; when memory runs out, the newest running request pays.
        # Stuck? `miniyaie hint 1.4` prints hints, one level at a time.
        # TODO(Task 1.4): Serve running requests within the budget. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 4: Serve running requests within the budget — see book/src/ch01_scheduler.md')
    # ANCHOR_END: schedule_running

    # ANCHOR: preempt
    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        """Preemption by recompute: the request gives its KV cache back and will compute it again.

        A preempted request keeps its tokens (prompt and output) but none of
        its K/V or memory, and is PREEMPTED; it waits ahead of every request
        that never ran, and it still counts its wait from when it was added.
        The step and both counters (request's and scheduler's) know of it.
        Example (asserted): c, then b, preempted while d waits: [b, c, d].
        """
        # Idea: give the memory back, forget what was computed, and queue it ahead of everyone.
        # Stuck? `miniyaie hint 1.5` prints hints, one level at a time.
        # TODO(Task 1.5): A request leaves early: preemption and abort. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 5: A request leaves early: preemption and abort — see book/src/ch01_scheduler.md')
    # ANCHOR_END: preempt

    # ANCHOR: admit_waiting
    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> None:
        """Admit waiting requests, in the order self._admission_order() gives, within `budget`.

        Nobody is admitted past a request that finds the budget spent,
        max_num_seqs running, or no room (policy.fits_with_reserve with
        config.decode_reserve), except past a long prompt that
        self.long_prefills.tokens_for grants 0. An admitted request runs, the
        newest, with its first chunk (as tokens_for grants) allocated and in
        `out`; the chunk skips what self.memory.cached_prefix_len says is
        cached (self.prefix_len only orders the queue), never the last known
        token, whose logits give the next one, and num_cached_tokens is what
        it skipped. A request not admitted is exactly as it was. Example
        (asserted): 14 slots, prompts of 10, 8 and 1 waiting: the 10 runs,
        the 8 and the 1 wait. The code after yours hands the budget left to
        the long prefills (Task 1.7).
        """
        order = self._admission_order()
        # Idea: admit in order until something does not fit; never skip ahead.
        # Stuck? `miniyaie hint 1.2` prints hints, one level at a time.
        # TODO(Task 1.2): Admit waiting requests. Replace this line with your code.
        raise NotImplementedError('Chapter 1, Task 2: Admit waiting requests — see book/src/ch01_scheduler.md')
        self.long_prefills.top_up(out, self.config.max_num_batched_tokens - out.num_batched_tokens, self.memory)
        if self.long_prefills.lift(out, self.config.max_num_batched_tokens - out.num_batched_tokens):
            self._admit_waiting(out, self.config.max_num_batched_tokens - out.num_batched_tokens)  # held-back long prompts
    # ANCHOR_END: admit_waiting

    def _admission_order(self):
        """The waiting requests in the order admission tries them (policy.admission_order), and with
        `hold_shared_prefix` the requests that should wait for a prefix being computed left out."""
        queued_at = lambda r: self._queued_at.get(r.request_id, self.num_schedules)  # noqa: E731 (forked: now)
        order = admission_order(self.waiting, self.prefix_len, self.config, queued_at, self.num_schedules)
        if not self.config.hold_shared_prefix:
            return order
        return hold_shared_prefixes(order, self.running, self.prefix_len, getattr(self.memory, "block_size", 1), self._held)

    def _held(self) -> None:
        self.num_held_for_prefix += 1

    # ------------------------------------------------------------ after the model ran
    # ANCHOR: update
    def update(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Record the step's progress and new tokens; returns the requests that finished, in chunk order.

        Afterwards every chunk's request has computed its chunk's tokens. A
        chunk that reached the end of its request's known tokens
        (samples_next_token) appends sampled[request_id] to the output; a
        chunk in the middle of a prompt samples nothing. A request finishes
        with STOP when its new token is one of its eos_token_ids (unless
        ignore_eos), else with LENGTH when its output now has max_tokens
        tokens (an end-of-sequence token that is also the last allowed one
        is STOP); a finished request leaves `running`, holds no memory and is
        no longer known by its id (self._finish). Chunks of requests aborted
        while the step ran are skipped.
        """
        finished = []
        for chunk in out.chunks:
            request = chunk.request
            if request.is_finished:  # aborted while the step ran
                continue
            # Idea: the step computed the chunk; only a chunk that reached the end yields a token.
            # Stuck? `miniyaie hint 1.3` prints hints, one level at a time.
            # TODO(Task 1.3): Record a step's results. Replace this line with your code.
            raise NotImplementedError("Chapter 1, Task 3: Record a step's results — see book/src/ch01_scheduler.md")
        return finished
    # ANCHOR_END: update

    def stats(self) -> dict[str, int]:
        return {
            "num_waiting": len(self.waiting),
            "num_running": len(self.running),
            "num_preemptions": self.num_preemptions,
            "num_held_for_prefix": self.num_held_for_prefix,
            "num_long_prefills_held": self.long_prefills.num_held,
        }
