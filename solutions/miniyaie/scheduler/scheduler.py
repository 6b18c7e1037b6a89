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
        # Nudge: refuse up front what could never run, or it would block the queue forever.
        # Hint 1: Two checks before anything is queued: an id must name one unfinished request
        #   (self.requests holds them), and the request's largest possible size must fit the
        #   whole pool, since a request is never skipped and never shrinks.
        # Hint 2: If request_id is already a key of self.requests, raise ValueError. If
        #   request.max_total_tokens is more than self.memory.capacity_tokens, raise ValueError
        #   saying how many tokens it needs and how many the pool holds. Name the id in both.
        # Hint 3:
        #   if request_id in requests: raise ValueError(f"request id {id!r} is already in use")
        #   if max_total_tokens > memory.capacity_tokens: raise ValueError(f"request {id!r} needs ...")
        # BEGIN SOLUTION 1.2: Admit waiting requests
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        if request.max_total_tokens > self.memory.capacity_tokens:
            raise ValueError(
                f"request {request.request_id!r} needs up to {request.max_total_tokens} tokens of KV cache; "
                f"the pool holds {self.memory.capacity_tokens}"
            )
        # END SOLUTION
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
        # Nudge: a request is in exactly one queue; take it out and finish it.
        # Hint 1: A cancelled request must leave no trace: in neither queue, no memory held,
        #   status FINISHED with FinishReason.ABORT, and no longer known by its id. It may be
        #   waiting (never ran, or preempted) or running.
        # Hint 2: Look the id up in self.requests (None, or a finished request: return None).
        #   Remove the request from self.waiting if it is there, from self.running if it
        #   is there, then let self._finish(request, FinishReason.ABORT) free its memory and do
        #   the rest of the bookkeeping.
        # Hint 3:
        #   request = requests.get(request_id); if request is None or request.is_finished: return None
        #   if request in waiting: waiting.remove(request)
        #   if request in running: running.remove(request)
        #   _finish(request, ABORT); return request
        # BEGIN SOLUTION 1.5: A request leaves early: preemption and abort
        request = self.requests.get(request_id)
        if request is None or request.is_finished:
            return None
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
        self._finish(request, FinishReason.ABORT)
        return request
        # END SOLUTION
    # ANCHOR_END: abort

    # ANCHOR: finish
    def _finish(self, request: Request, reason: FinishReason) -> None:
        """End a request that is in neither queue any more. Afterwards it holds no memory, it is
        FINISHED with `reason` as its finish_reason, and it is no longer in self.requests (which
        holds unfinished requests only): its id is free for add_request and add_forked."""
        # Nudge: a finished request holds nothing and is known by nobody.
        # Hint 1: Once finished, a request's memory goes back to the pool and its id is free:
        #   self.requests holds unfinished requests only.
        # Hint 2: Free its memory, set status FINISHED and finish_reason, delete its id from
        #   self.requests.
        # Hint 3:
        #   memory.free(r); r.status, r.finish_reason = FINISHED, reason; del requests[r.request_id]
        # BEGIN SOLUTION 1.3: Record a step's results
        self.memory.free(request)
        request.status, request.finish_reason = RequestStatus.FINISHED, reason
        del self.requests[request.request_id]
        # END SOLUTION
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
        # Nudge: one budget, two kinds of request: which is served first, and when does the other get nothing?
        # Hint 1: One budget per step, spent twice: first on the running requests, then on
        #   admissions. A preemption means memory is too tight for what runs already: admitting
        #   someone in that same step would only preempt again.
        # Hint 2: Count the schedule; make an empty SchedulerOutput; let _schedule_running fill it
        #   with the whole budget; subtract the tokens it scheduled; unless it preempted someone,
        #   let _admit_waiting use the rest; return the output.
        # Hint 3:
        #   num_schedules += 1; out = SchedulerOutput(); budget = max_num_batched_tokens
        #   _schedule_running(out, budget); budget -= out.num_batched_tokens
        #   if not out.preempted: _admit_waiting(out, budget)
        #   return out
        # BEGIN SOLUTION 1.2: Admit waiting requests
        self.num_schedules += 1
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        self._schedule_running(out, budget)
        budget -= out.num_batched_tokens
        if not out.preempted:  # memory is tight: let the running requests drain first
            self._admit_waiting(out, budget)
        return out
        # END SOLUTION
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
        # Nudge: oldest first within the budget; when memory runs out, the newest running request pays.
        # Hint 1: Running requests come first so that a request in flight always progresses. Walk
        #   them in admission order while budget is left; each gets the tokens it still lacks,
        #   at most the budget. Memory is the invariant: every scheduled token is allocated.
        #   When a request cannot grow, take memory back from the NEWEST running request, which
        #   keeps the oldest always progressing (first come, first served).
        # Hint 2: For each running request, oldest first, while budget > 0: n = its tokens not yet
        #   computed, capped by the budget (ask self.long_prefills.tokens_for(request, budget)).
        #   While memory cannot allocate n for it, preempt the last request of self.running; if
        #   that was the request itself, stop the walk. Then allocate, add
        #   ScheduledChunk(request, start=num_computed_tokens, num_tokens=n) to out.chunks and
        #   spend n of the budget. Preempting shortens self.running under the
        #   walk: walk by index, not with a for loop over the list.
        # Hint 3:
        #   i = 0
        #   while i < len(running) and budget > 0:
        #       r = running[i]; n = long_prefills.tokens_for(r, budget)
        #       while not memory.can_allocate(r, n):
        #           victim = running[-1]; _preempt(victim, out)
        #           if victim is r: return
        #       memory.allocate(r, n); out.chunks.append(ScheduledChunk(r, r.num_computed_tokens, n))
        #       budget -= n; i += 1
        # BEGIN SOLUTION 1.4: Serve running requests within the budget
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = self.long_prefills.tokens_for(request, budget)
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
        """Preemption by recompute: the request gives its KV cache back and will compute it again.

        A preempted request keeps its tokens (prompt and output) but none of
        its K/V or memory, and is PREEMPTED; it waits ahead of every request
        that never ran, and it still counts its wait from when it was added.
        The step and both counters (request's and scheduler's) know of it.
        Example (asserted): c, then b, preempted while d waits: [b, c, d].
        """
        # Nudge: give the memory back, forget what was computed, and queue it ahead of everyone.
        # Hint 1: Recompute, not swap: the request keeps its tokens (prompt and output so far) but
        #   none of its K/V, so num_computed_tokens goes back to 0 and all its memory is freed.
        #   It goes to the front of the queue: it was admitted before everyone waiting, and
        #   first come, first served must still hold.
        # Hint 2: Remove it from self.running and free its memory; set num_computed_tokens to 0 and
        #   status to PREEMPTED; add one to request.num_preemptions and self.num_preemptions;
        #   put it at the front of self.waiting (appendleft) and append it to out.preempted.
        # Hint 3:
        #   running.remove(r); memory.free(r)
        #   r.num_computed_tokens = 0; r.status = PREEMPTED
        #   r.num_preemptions += 1; self.num_preemptions += 1
        #   waiting.appendleft(r); out.preempted.append(r)
        # BEGIN SOLUTION 1.5: A request leaves early: preemption and abort
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
        # Nudge: admit in order until something does not fit; never skip ahead.
        # Hint 1: Admission stops at the first request that cannot run now: skipping it for a
        #   smaller one would let a stream of short requests starve a long one (the one
        #   exception, a long prompt the long-prefill bound holds back, waits only while other
        #   long prompts are prefilled). A request starts on what the memory already caches (ask
        #   the memory, not the ordering oracle), but
        #   always computes its last known token: its logits are where the next token comes from.
        #   A request that is not admitted must be left untouched.
        # Hint 2: For each request in order: stop when the budget is 0 or max_num_seqs requests
        #   run. cached = min(memory.cached_prefix_len(request), num_tokens - 1); set
        #   num_computed_tokens to it (the memory sizes the chunk from there); n = the rest of
        #   its tokens, capped by the budget: self.long_prefills.tokens_for(request, budget). If n
        #   is 0 (a long prompt the long-prefill bound holds back), put num_computed_tokens back to 0 and go on
        #   to the next. If it does not fit with the reserve (fits_with_reserve), put
        #   num_computed_tokens back to 0 and stop. Otherwise allocate, record cached in
        #   num_cached_tokens, move it from waiting to running with status RUNNING, schedule
        #   ScheduledChunk(request, cached, n) and spend the budget.
        # Hint 3:
        #   for r in order:
        #       if budget == 0 or len(running) >= max_num_seqs: break
        #       cached = min(memory.cached_prefix_len(r), r.num_tokens - 1)
        #       r.num_computed_tokens = cached; n = long_prefills.tokens_for(r, budget)
        #       if n == 0: r.num_computed_tokens = 0; continue
        #       if not fits_with_reserve(memory, running, r, n, decode_reserve):
        #           r.num_computed_tokens = 0; break
        #       memory.allocate(r, n); r.num_cached_tokens = cached
        #       waiting.remove(r); running.append(r); r.status = RUNNING
        #       out.chunks.append(ScheduledChunk(r, cached, n)); budget -= n
        # BEGIN SOLUTION 1.2: Admit waiting requests
        for request in order:
            if budget == 0 or len(self.running) >= self.config.max_num_seqs:
                break
            cached = min(self.memory.cached_prefix_len(request), request.num_tokens - 1)
            request.num_computed_tokens = cached
            num_new = self.long_prefills.tokens_for(request, budget)
            if num_new == 0:  # a long prompt held back by the long-prefill bound: shorter ones may pass
                request.num_computed_tokens = 0
                continue
            if not fits_with_reserve(self.memory, self.running, request, num_new, self.config.decode_reserve):
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
            # Nudge: the step computed the chunk; only a chunk that reached the end yields a token.
            # Hint 1: The K/V of the chunk's tokens are now in the cache, so num_computed_tokens
            #   moves past them. Only a chunk that reached the last known token has logits for a
            #   next token (a chunk in the middle of a long prompt has none). A new token may end
            #   the request: an end-of-sequence token (unless ignore_eos) or max_tokens reached.
            # Hint 2: Add chunk.num_tokens to num_computed_tokens. If the chunk does not sample a
            #   next token, go on to the next chunk. Otherwise append sampled[request_id] to the
            #   output; the reason is STOP for an EOS token (not ignored), else LENGTH when the
            #   output has max_tokens tokens, else none. A finished request leaves self.running
            #   and goes through self._finish(request, reason); collect it in `finished`.
            # Hint 3:
            #   r.num_computed_tokens += chunk.num_tokens
            #   if not chunk.samples_next_token: continue
            #   token = sampled[r.request_id]; r.output_token_ids.append(token)
            #   reason = STOP if token in r.eos_token_ids and not r.ignore_eos
            #            else LENGTH if len(r.output_token_ids) >= r.max_tokens else None
            #   if reason: running.remove(r); _finish(r, reason); finished.append(r)
            # BEGIN SOLUTION 1.3: Record a step's results
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
            # END SOLUTION
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
