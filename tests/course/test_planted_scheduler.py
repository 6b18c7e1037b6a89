"""Chapter 1's tests name the mistakes a learner trial made (each once accepted by grading).

Each case replaces one piece of the reference scheduler with a plausible wrong answer, runs the
test of that piece's task that should catch it, and checks that it fails with a message naming the mistake.
"""

import re
from pathlib import Path

import pytest
from planted import import_planted

from miniyaie.scheduler import FinishReason, RequestStatus, ScheduledChunk, long_prefill, policy, scheduler
from miniyaie.scheduler.step import SchedulerOutput

pytestmark = pytest.mark.ungraded
CH01 = Path(__file__).resolve().parents[1] / "ch01_scheduler"


def top_up_all_or_nothing(self, out, budget, memory):
    """Grows a cut chunk only when the budget left covers all it lacks."""
    if not self.threshold or self.lifted:
        return
    for index, chunk in enumerate(out.chunks):
        lack = chunk.request.num_tokens - chunk.start - chunk.num_tokens
        if 0 < lack <= budget and memory.can_allocate(chunk.request, chunk.num_tokens + lack):
            memory.allocate(chunk.request, chunk.num_tokens + lack)
            out.chunks[index] = ScheduledChunk(chunk.request, chunk.start, chunk.num_tokens + lack)
            budget -= lack


def top_up_newest_first(self, out, budget, memory):
    """Walks the chunks from the newest."""
    if not self.threshold or self.lifted:
        return
    for index in reversed(range(len(out.chunks))):
        chunk = out.chunks[index]
        extra = min(chunk.request.num_tokens - chunk.start - chunk.num_tokens, budget)
        if extra > 0 and memory.can_allocate(chunk.request, chunk.num_tokens + extra):
            memory.allocate(chunk.request, chunk.num_tokens + extra)
            out.chunks[index] = ScheduledChunk(chunk.request, chunk.start, chunk.num_tokens + extra)
            budget -= extra


def top_up_by_a_part(self, out, budget, memory):
    """Grows a cut chunk as far as the memory allows when it cannot take all it may."""
    if not self.threshold or self.lifted:
        return
    for index, chunk in enumerate(out.chunks):
        extra = min(chunk.request.num_tokens - chunk.start - chunk.num_tokens, budget)
        while extra > 0 and not memory.can_allocate(chunk.request, chunk.num_tokens + extra):
            extra -= 1
        if extra > 0:
            memory.allocate(chunk.request, chunk.num_tokens + extra)
            out.chunks[index] = ScheduledChunk(chunk.request, chunk.start, chunk.num_tokens + extra)
            budget -= extra


def schedule_not_counting(self):
    """Schedules without adding one to num_schedules."""
    out = SchedulerOutput()
    self.long_prefills.start_step()
    self._schedule_running(out, self.config.max_num_batched_tokens)
    if not out.preempted:
        self._admit_waiting(out, self.config.max_num_batched_tokens - out.num_batched_tokens)
    return out


def finish_keeping_the_id(self, request, reason):
    """Frees the memory and sets the status, but the finished request stays known by its id."""
    self.memory.free(request)
    request.status, request.finish_reason = RequestStatus.FINISHED, reason


def schedule_admitting_after_a_preemption(self):
    """Admits with the budget left even in a step that preempted."""
    self.long_prefills.start_step()
    self.num_schedules += 1
    out = SchedulerOutput()
    self._schedule_running(out, self.config.max_num_batched_tokens)
    self._admit_waiting(out, self.config.max_num_batched_tokens - out.num_batched_tokens)
    return out


def admit_asking_before_the_cached_start(self, out, budget):
    """Asks tokens_for before setting the cached start, then clips the grant to what is left after the cache."""
    for request in self._admission_order():
        if budget == 0 or len(self.running) >= self.config.max_num_seqs:
            break
        cached = min(self.memory.cached_prefix_len(request), request.num_tokens - 1)
        num_new = min(self.long_prefills.tokens_for(request, budget), request.num_tokens - cached)
        if num_new == 0:
            continue
        request.num_computed_tokens = cached
        if not policy.fits_with_reserve(self.memory, self.running, request, num_new, self.config.decode_reserve):
            request.num_computed_tokens = 0
            break
        self.memory.allocate(request, num_new)
        request.num_cached_tokens = cached
        self.waiting.remove(request)
        self.running.append(request)
        request.status = RequestStatus.RUNNING
        out.chunks.append(ScheduledChunk(request, cached, num_new))
        budget -= num_new
    self.long_prefills.top_up(out, self.config.max_num_batched_tokens - out.num_batched_tokens, self.memory)
    if self.long_prefills.lift(out, self.config.max_num_batched_tokens - out.num_batched_tokens):
        self._admit_waiting(out, self.config.max_num_batched_tokens - out.num_batched_tokens)


def overdue_by_arrival(waiting, prefix_len, config, queued_at, now):
    """Puts the overdue requests first, but in arrival order rather than queue order."""
    if len(waiting) > config.lpm_max_queue:
        return list(waiting)
    limit = now - config.max_wait_steps
    overdue = sorted((r for r in waiting if queued_at(r) <= limit), key=lambda r: r.arrival)
    return overdue + [r for r in policy.lpm_order(waiting, prefix_len) if queued_at(r) > limit]


def lpm_ties_by_arrival(waiting, prefix_len):
    """Breaks ties by arrival, not by the place in the queue (a preempted request waits in front)."""
    return sorted(waiting, key=lambda request: (-prefix_len(request), request.arrival))


def top_up_stopping_at_a_chunk_memory_cannot_grow(self, out, budget, memory):
    """Ends the walk at the first cut chunk the memory cannot grow, leaving newer ones that would fit unserved."""
    if not self.threshold or self.lifted:
        return
    for index, chunk in enumerate(out.chunks):
        extra = min(chunk.request.num_tokens - chunk.start - chunk.num_tokens, budget)
        if extra <= 0:
            continue
        if not memory.can_allocate(chunk.request, chunk.num_tokens + extra):
            break
        memory.allocate(chunk.request, chunk.num_tokens + extra)
        out.chunks[index] = ScheduledChunk(chunk.request, chunk.start, chunk.num_tokens + extra)
        budget -= extra


def add_request_checking_waiting_ids_only(self, request):
    """Refuses an id in use only when a waiting request has it (a running one's id is accepted)."""
    if any(r.request_id == request.request_id for r in self.waiting):
        raise ValueError(f"request id {request.request_id!r} is already in use")
    if request.max_total_tokens > self.memory.capacity_tokens:
        raise ValueError(f"request {request.request_id!r} is too big")
    self.requests[request.request_id] = request
    self._queued_at[request.request_id] = self.num_schedules
    self.waiting.append(request)


def update_stopping_at_the_first_eos_only(self, out, sampled):
    """Stops a request only at the first of its end-of-sequence ids."""
    finished = []
    for chunk in out.chunks:
        request = chunk.request
        if request.is_finished:
            continue
        request.num_computed_tokens += chunk.num_tokens
        if not chunk.samples_next_token:
            continue
        token = sampled[request.request_id]
        request.output_token_ids.append(token)
        reason = None
        if token == request.eos_token_ids[0] and not request.ignore_eos:
            reason = FinishReason.STOP
        elif len(request.output_token_ids) >= request.max_tokens:
            reason = FinishReason.LENGTH
        if reason is not None:
            self.running.remove(request)
            self._finish(request, reason)
            finished.append(request)
    return finished


_reference_preempt = scheduler.Scheduler._preempt


def preempt_restarting_the_wait(self, request, out):
    """Preempts as the reference does, then counts the request's wait from now."""
    _reference_preempt(self, request, out)
    self._queued_at[request.request_id] = self.num_schedules


def schedule_counting_after_admission(self):
    """Counts the schedule once admission is done: admission_order's `now` is then the previous schedule."""
    self.long_prefills.start_step()
    out = SchedulerOutput()
    self._schedule_running(out, self.config.max_num_batched_tokens)
    if not out.preempted:
        self._admit_waiting(out, self.config.max_num_batched_tokens - out.num_batched_tokens)
    self.num_schedules += 1
    return out


def running_served_skipping_what_does_not_fit(self, out, budget):
    """Never preempts: a running request the memory cannot grow is passed over this step."""
    for request in list(self.running):
        if budget == 0:
            break
        num_new = self.long_prefills.tokens_for(request, budget)
        if not self.memory.can_allocate(request, num_new):
            continue
        self.memory.allocate(request, num_new)
        out.chunks.append(ScheduledChunk(request, request.num_computed_tokens, num_new))
        budget -= num_new


def _running_served_preempting(pick):
    def serve(self, out, budget):
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = self.long_prefills.tokens_for(request, budget)
            while not self.memory.can_allocate(request, num_new):
                victim = pick(self.running, index)
                self._preempt(victim, out)
                if victim is request:
                    return
            self.memory.allocate(request, num_new)
            out.chunks.append(ScheduledChunk(request, request.num_computed_tokens, num_new))
            budget -= num_new
            index += 1
    return serve


PLANTS = {  # mistake: (class or module, attribute, wrong answer, test module, test, what the message must say)
    "top_up all or nothing": (
        long_prefill.LongPrefillBound, "top_up", top_up_all_or_nothing, "test_long_prefill",
        "test_the_leftover_budget_goes_to_the_oldest_cut_prefill_even_when_it_cannot_finish_it",
        r"a chunk takes what is left even when that is less than its request lacks"),
    "top_up newest first": (
        long_prefill.LongPrefillBound, "top_up", top_up_newest_first, "test_long_prefill",
        "test_the_leftover_budget_goes_to_the_oldest_cut_prefill_even_when_it_cannot_finish_it",
        r"go to the cut chunks oldest first"),
    "top_up grows a chunk by a part": (
        long_prefill.LongPrefillBound, "top_up", top_up_by_a_part, "test_long_prefill",
        "test_a_cut_prefill_the_memory_cannot_grow_by_all_it_may_take_stays_as_it_is",
        r"grows a chunk by all it may take or leaves it as it is"),
    "schedule not counting itself": (
        scheduler.Scheduler, "schedule", schedule_not_counting, "test_scheduler",
        "test_each_schedule_counts_itself", r"num_schedules is 0 after 3 schedules"),
    "_finish keeps the id": (
        scheduler.Scheduler, "_finish", finish_keeping_the_id, "test_update",
        "test_a_finished_request_gives_back_its_memory_and_its_id", r"Task 1.3: .* a finished request is no longer known by its id"),
    "admission asks tokens_for before the cached start": (
        scheduler.Scheduler, "_admit_waiting", admit_asking_before_the_cached_start, "test_long_prefill",
        "test_a_prompt_whose_rest_after_its_cached_prefix_is_short_is_not_long",
        r"Task 1.7: .*set num_computed_tokens to the cached start before asking tokens_for"),
    "overdue requests by arrival": (
        None, "admission_order", overdue_by_arrival, "test_admission_rules",
        "test_admission_order_is_lpm_with_overdue_requests_first",
        r"Task 1.6: the overdue keep the queue's order, not their arrival order"),
    "admission in a step that preempted": (
        scheduler.Scheduler, "schedule", schedule_admitting_after_a_preemption, "test_scheduler",
        "test_no_request_is_admitted_in_a_step_that_preempted",
        r"no request is admitted in a step that preempted one \(schedule's rule"),
    "lpm ties by arrival": (
        None, "lpm_order", lpm_ties_by_arrival, "test_scheduler",
        "test_lpm_order_puts_longer_prefixes_first_and_keeps_the_queue_order_among_equals",
        r"equal prefixes keep their order in the queue \(not their arrival"),
    "top_up stops at a chunk memory cannot grow": (
        long_prefill.LongPrefillBound, "top_up", top_up_stopping_at_a_chunk_memory_cannot_grow, "test_long_prefill",
        "test_the_leftover_budget_grows_a_cut_prefill_only_as_far_as_memory_allows",
        r"Task 1.7: .*a chunk the memory cannot grow does not end the walk"),
    "duplicate ids checked in waiting only": (
        scheduler.Scheduler, "add_request", add_request_checking_waiting_ids_only, "test_scheduler",
        "test_a_request_that_could_never_run_is_refused_at_once",
        r"Task 1.2: add_request accepted .* of a request that is running"),
    "only the first eos id stops": (
        scheduler.Scheduler, "update", update_stopping_at_the_first_eos_only, "test_update",
        "test_any_of_a_requests_end_of_sequence_ids_stops_it", r"Task 1.3: .*any of a request's eos_token_ids stops it"),
    "preemption restarts the LPM wait": (
        scheduler.Scheduler, "_preempt", preempt_restarting_the_wait, "test_admission_rules",
        "test_a_preempted_request_keeps_its_place_in_lpms_overdue_order",
        r"Task 1.6: .*A preemption does not restart its wait.*_preempt leaves it"),
    "schedule counting after admission": (
        scheduler.Scheduler, "schedule", schedule_counting_after_admission, "test_scheduler",
        "test_each_schedule_counts_itself", r"Task 1.2: admission ran on the first schedule with num_schedules \[0\]"),
    "running requests never preempt": (
        scheduler.Scheduler, "_schedule_running", running_served_skipping_what_does_not_fit, "test_scheduler",
        "test_when_memory_runs_out_the_newest_running_requests_give_way", r"Task 1.4: preempted \[\] .*never skipped"),
    "a running request preempts itself first": (
        scheduler.Scheduler, "_schedule_running", _running_served_preempting(lambda running, index: running[index]),
        "test_scheduler", "test_when_memory_runs_out_the_newest_running_requests_give_way",
        r"Task 1.4: preempted .* the newest .* gives way"),
    "a running request preempts the next newer": (
        scheduler.Scheduler, "_schedule_running",
        _running_served_preempting(lambda running, index: running[min(index + 1, len(running) - 1)]),
        "test_scheduler", "test_when_memory_runs_out_the_newest_running_requests_give_way",
        r"Task 1.4: preempted .* the newest .* gives way"),
}


@pytest.mark.parametrize("mistake", list(PLANTS))
def test_a_planted_mistake_fails_its_tasks_test_with_a_message_that_names_it(mistake, monkeypatch):
    owner, attribute, wrong, test_module, test_name, message = PLANTS[mistake]
    monkeypatch.syspath_prepend(str(CH01))
    tests = import_planted(CH01 / f"{test_module}.py", f"planted_tests_{test_module}")
    monkeypatch.setattr(owner or tests, attribute, wrong)
    with pytest.raises((AssertionError, pytest.fail.Exception)) as failure:
        getattr(tests, test_name)()
    assert re.search(message, str(failure.value), re.S), f"the message does not name the mistake ({message!r}): {failure.value}"
