"""Chapter 1 tasks, one behaviour at a time, through the scheduler's public interface."""

import itertools

import pytest
from fake_model import Driver, check_step, reference_output
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.scheduler import FinishReason, Request, RequestStatus, Scheduler, SchedulerConfig, TokenCountingMemory
from miniyaie.scheduler import lpm_order

_ids = itertools.count()


def request(prompt_len: int, max_tokens: int = 4, **kwargs) -> Request:
    rid = f"r{next(_ids)}"
    return Request(rid, [(7 * i + len(rid)) % 50 + 1 for i in range(prompt_len)], max_tokens, ignore_eos=True, **kwargs)


def scheduler(budget=64, seqs=8, capacity=1000, policy="fcfs", memory=None, prefix_len=None) -> Scheduler:
    config = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=seqs, policy=policy)
    return Scheduler(config, memory or TokenCountingMemory(capacity), prefix_len)


@pytest.mark.task("1.1")
@given(
    capacity=st.integers(1, 40),
    wants=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 15), st.booleans()), max_size=20),
)
@example(capacity=5, wants=[(0, 5, True), (1, 1, True)])  # the pool exactly full, then one token more
@example(capacity=9, wants=[(0, 6, False), (0, 2, True), (1, 3, True)])  # asking less than it holds takes nothing
def test_counting_memory_contract(capacity, wants):
    memory = TokenCountingMemory(capacity)
    requests = [request(1) for _ in range(4)]
    held = {r.request_id: 0 for r in requests}  # the model: slots each request must hold
    for index, n, run in wants:
        r = requests[index]
        missing = max(0, r.num_computed_tokens + n - held[r.request_id])
        fits = memory.can_allocate(r, n)
        assert memory.num_used_tokens == sum(held.values()), "can_allocate only asks"
        assert fits == (missing <= capacity - sum(held.values())), (
            f"{r.request_id} holds {held[r.request_id]}, asks for {r.num_computed_tokens} + {n}: it misses {missing} "
            f"of {capacity - sum(held.values())} free slots, so can_allocate must say {not fits}"
        )
        if fits:
            memory.allocate(r, n)
            held[r.request_id] = max(held[r.request_id], r.num_computed_tokens + n)
            if run:
                r.num_computed_tokens += n
        else:
            with pytest.raises(MemoryError):
                memory.allocate(r, n)
        assert memory.num_used_tokens == sum(held.values()) <= capacity, (
            f"the memory holds {memory.num_used_tokens} slots; the requests hold {held}: "
            "a request grows to num_computed + num_new tokens, never shrinks, and a refused allocate changes nothing"
        )
    for r in requests:
        memory.free(r)
    memory.free(requests[0])  # freeing twice (a preempted request finishing) is harmless
    assert memory.num_used_tokens == 0, "free gives every slot back"


@pytest.mark.task("1.2")
@given(
    prompt_lens=st.lists(st.integers(1, 12), min_size=1, max_size=10),
    budget=st.integers(1, 30),
    seqs=st.integers(1, 4),
)
@example(prompt_lens=[5, 5, 5, 5], budget=100, seqs=4)  # all arrive at once, all fit
@example(prompt_lens=[5, 5, 5], budget=10, seqs=4)  # the budget is spent exactly by two prompts
@example(prompt_lens=[3, 3, 3], budget=100, seqs=2)  # the seats run out first
def test_admission_respects_budget_seats_and_arrival_order(prompt_lens, budget, seqs):
    s = scheduler(budget=budget, seqs=seqs)
    requests = [request(n, max_tokens=2) for n in prompt_lens]
    for r in requests:  # all arrive at once
        s.add_request(r)
    out = s.schedule()
    check_step(s, out, running_before=[])
    admitted = [c.request for c in out.chunks]
    assert admitted == requests[: len(admitted)], "FCFS admits in arrival order"
    assert list(s.running) == admitted and list(s.waiting) == requests[len(admitted) :]
    assert [c.num_tokens for c in out.chunks[:-1]] == [r.num_tokens for r in admitted[:-1]], "whole prompts"
    room = min(budget, sum(prompt_lens[: len(admitted)]))
    assert len(admitted) == min(len(requests), seqs) or out.num_batched_tokens == budget
    assert out.num_batched_tokens == room, "the budget is used while requests wait"
    assert s.memory.num_used_tokens == out.num_batched_tokens, "every admitted chunk is allocated"
    for r in requests[len(admitted) :]:
        assert r.status is RequestStatus.WAITING and r.num_computed_tokens == 0


class PrefixCachingMemory(TokenCountingMemory):
    """Counting memory that claims the first `cached` tokens of every prompt are already cached."""

    def __init__(self, capacity, cached):
        super().__init__(capacity)
        self.cached = cached

    def cached_prefix_len(self, request):
        return min(self.cached, len(request.prompt_token_ids))


@pytest.mark.task("1.2")
@given(prompt_len=st.integers(1, 20), cached=st.integers(0, 25), oracle=st.integers(0, 25))
@example(prompt_len=8, cached=8, oracle=8)  # a full-prompt hit still computes the last token
@example(prompt_len=8, cached=3, oracle=3)
@example(prompt_len=8, cached=0, oracle=6)  # the ordering oracle says 6, the memory holds nothing
@example(prompt_len=8, cached=5, oracle=0)
def test_admission_starts_after_the_cached_prefix(prompt_len, cached, oracle):
    memory = PrefixCachingMemory(100, cached)
    s = scheduler(memory=memory, prefix_len=lambda r: oracle)  # the oracle only orders the queue
    r = request(prompt_len, max_tokens=3)
    s.add_request(r)
    out = s.schedule()
    expected_start = min(cached, prompt_len - 1)
    assert len(out.chunks) == 1, (
        f"the one waiting request ({prompt_len} prompt tokens, {cached} cached) must be admitted with a chunk of "
        f"{prompt_len - expected_start} tokens from {expected_start} (the last known token is always computed); "
        f"got chunks {[(c.start, c.num_tokens) for c in out.chunks]}"
    )
    (chunk,) = out.chunks
    assert (chunk.start, chunk.num_tokens) == (expected_start, prompt_len - expected_start), (
        f"the memory holds {min(cached, prompt_len)} of {prompt_len} prompt tokens (the ordering oracle says {oracle}): "
        f"the chunk must start at {expected_start} (memory.cached_prefix_len, and the last token is always computed)"
    )
    assert r.num_computed_tokens == expected_start, "num_computed_tokens starts at the cached prefix"
    assert r.num_cached_tokens == expected_start, "num_cached_tokens records the tokens found in the cache"
    assert memory.num_used_tokens == prompt_len, "the memory holds the cached prefix and the new chunk"


@pytest.mark.task("1.2")
@given(cached=st.integers(0, 6), third_len=st.integers(1, 4))
@example(cached=4, third_len=1)
@example(cached=0, third_len=1)  # _admit_waiting's example: 14 slots, prompts of 10, 8 and 1
def test_a_request_that_does_not_fit_waits_untouched_and_blocks_the_queue(cached, third_len):
    # Memory for the first prompt and a little more: the second does not fit, the third would.
    memory = PrefixCachingMemory(capacity=14, cached=cached)
    s = scheduler(budget=100, seqs=4, memory=memory)
    first, second, third = request(10), request(8), request(third_len)
    for r in (first, second, third):
        s.add_request(r)
    out = s.schedule()
    check_step(s, out, running_before=[])
    assert [c.request.request_id for c in out.chunks] == [first.request_id], (
        f"only {first.request_id} fits; {second.request_id} does not, and {third.request_id} behind it must not be "
        f"admitted past it (no skipping ahead: a short request must not starve a long one); got "
        f"{[c.request.request_id for c in out.chunks]}"
    )
    assert list(s.waiting) == [second, third], "no skipping ahead: a short request must not starve a long one"
    for r in (second, third):
        assert r.status is RequestStatus.WAITING
        assert r.num_computed_tokens == 0, "a request that was not admitted has computed nothing"
    assert memory.num_used_tokens == 10, "only the admitted request holds memory"


@pytest.mark.task("1.4")
@given(prompt_len=st.integers(1, 40), budget=st.integers(1, 16), max_tokens=st.integers(1, 5))
@example(prompt_len=10, budget=1, max_tokens=2)  # budget 1
@example(prompt_len=33, budget=8, max_tokens=3)  # a prompt longer than the budget: chunked prefill
def test_running_requests_get_their_next_chunk(prompt_len, budget, max_tokens):
    s = scheduler(budget=budget)
    r = request(prompt_len, max_tokens)
    driver = Driver(s)
    driver.add(r)
    driver.run_to_completion(max_steps=prompt_len + max_tokens + 2)
    chunks = [c.num_tokens for out in driver.trace.steps for c in out.chunks]
    assert sum(chunks) == prompt_len + max_tokens - 1, "every token computed once (the last sampled one is never fed)"
    assert chunks[: -(max_tokens - 1) or None] == [min(budget, prompt_len - i) for i in range(0, prompt_len, budget)]
    assert r.output_token_ids == reference_output(r.prompt_token_ids, max_tokens)


@pytest.mark.task("1.4")
def test_running_requests_are_served_before_new_ones():
    s = scheduler(budget=4)
    a, b = request(3, max_tokens=5), request(3, max_tokens=5)
    driver = Driver(s)
    driver.add(a)
    driver.step()  # a's prompt (3 tokens)
    driver.add(b)
    out = driver.step()
    got = [(c.request.request_id, c.num_tokens) for c in out.chunks]
    assert got == [(a.request_id, 1), (b.request_id, 3)], (
        f"step 2 (budget 4): running {a.request_id} decodes 1 token first, then waiting {b.request_id} is admitted "
        f"with its 3-token prompt: expected [({a.request_id!r}, 1), ({b.request_id!r}, 3)], got {got}"
    )
    out = driver.step()
    got = [(c.request.request_id, c.num_tokens) for c in out.chunks]
    assert got == [(a.request_id, 1), (b.request_id, 1)], (
        f"step 3: two decodes share a step, the older ({a.request_id}) first: got {got}"
    )


@pytest.mark.task("1.4")
@given(num_requests=st.integers(2, 6), budget=st.integers(1, 6))
@example(num_requests=3, budget=2)  # the budget runs out before the last running request
@example(num_requests=4, budget=4)  # exactly one decode each
def test_decodes_share_the_budget_oldest_first(num_requests, budget):
    s = scheduler(budget=100, seqs=8)
    driver = Driver(s)
    requests = [request(2, max_tokens=6) for _ in range(num_requests)]
    for r in requests:
        driver.add(r)
    driver.step()  # every prompt at once: now all decode
    s.config = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=8)
    served = [c.request for c in driver.step().chunks]
    assert served == requests[: min(budget, num_requests)], "one token each, oldest first, never an empty chunk"
    driver.run_to_completion(max_steps=200)
    for r in requests:
        assert r.output_token_ids == reference_output(r.prompt_token_ids, r.max_tokens)


@pytest.mark.task("1.4")
@given(
    prompt_lens=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    budget=st.integers(1, 30),
    seqs=st.integers(1, 4),
)
def test_every_request_runs_to_the_end_in_arrival_order(prompt_lens, budget, seqs):
    s = scheduler(budget=budget, seqs=seqs, capacity=1000)  # memory for all: no preemption
    driver = Driver(s)
    requests = [request(n, max_tokens=3) for n in prompt_lens]
    for r in requests:
        driver.add(r)
    driver.run_to_completion(max_steps=400)
    assert driver.trace.first_admissions == [r.request_id for r in requests]
    for r in requests:
        assert r.output_token_ids == reference_output(r.prompt_token_ids, r.max_tokens)
    assert s.memory.num_used_tokens == 0, "finished requests give their memory back"


class PreemptStandIn(Scheduler):
    """Task 1.5's _preempt stood in for by what Task 1.4's loop relies on: the victim leaves running and
    gives its memory back (where it waits, and its counters, are Task 1.5's to get right)."""

    def _preempt(self, request, out):
        self.running.remove(request)
        self.memory.free(request)
        out.preempted.append(request)


@pytest.mark.task("1.4")
def test_when_memory_runs_out_the_newest_running_requests_give_way():
    memory = TokenCountingMemory(100)
    s = PreemptStandIn(SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=3), memory)
    a, b, c = (request(4, max_tokens=8) for _ in range(3))
    for r in (a, b, c):
        s.add_request(r)
    out = s.schedule()
    s.update(out, {ch.request.request_id: 1 for ch in out.chunks if ch.samples_next_token})
    memory._capacity = 9  # each holds 4 of 12 slots, and the pool shrinks to 9: only a can grow by its next token
    out = s.schedule()
    got = ([r.request_id for r in out.preempted], [(ch.request.request_id, ch.num_tokens) for ch in out.chunks])
    want = ([c.request_id, b.request_id], [(a.request_id, 1)])
    assert got == want, (
        f"Task 1.4: preempted {got[0]} and scheduled {got[1]}; expected {want[0]} and {want[1]}: a grows first, the "
        f"newest ({c.request_id}) gives way, then {b.request_id} cannot grow and is the newest left, so it gives way "
        "itself and the walk stops (a request that does not fit is never skipped: someone newer pays for it)"
    )
    assert memory.num_used_tokens == 5, f"only a holds memory, its 4 tokens and the one scheduled: {memory.num_used_tokens}"


@pytest.mark.task("1.5")
def test_preempted_request_recomputes_and_matches_unpreempted_output():
    # Memory for one long request: the newer one is preempted when the older grows.
    s = scheduler(budget=16, capacity=24)
    driver = Driver(s, used_tokens=lambda: s.memory.num_used_tokens)
    old, new = request(10, max_tokens=12), request(8, max_tokens=12)
    driver.add(old)
    driver.step()
    driver.add(new)
    driver.run_to_completion(max_steps=200)
    assert new.num_preemptions >= 1 and s.num_preemptions >= 1
    assert old.num_preemptions == 0, "the newest request is preempted first"
    for r in (old, new):
        assert r.output_token_ids == reference_output(r.prompt_token_ids, r.max_tokens)
    preempted_step = next(i for i, out in enumerate(driver.trace.steps) if out.preempted)
    resumed = next(
        c for out in driver.trace.steps[preempted_step + 1 :] for c in out.chunks if c.request is new
    )
    assert resumed.start == 0, "recompute: the prompt and the tokens generated so far are prefilled again"
    assert s.memory.num_used_tokens == 0


@pytest.mark.task("1.5")
def test_requests_preempted_together_wait_at_the_front_in_their_order():
    memory = TokenCountingMemory(100)
    s = scheduler(budget=64, seqs=3, memory=memory)
    a, b, c, d = (request(4, max_tokens=8) for _ in range(4))
    for r in (a, b, c, d):
        s.add_request(r)
    out = s.schedule()  # a, b and c take the three seats; d waits
    s.update(out, {ch.request.request_id: 1 for ch in out.chunks if ch.samples_next_token})
    memory._capacity = 9  # the pool shrinks under them: a and b cannot both grow by one
    out = s.schedule()
    assert [r.request_id for r in out.preempted] == [c.request_id, b.request_id], (
        f"preempted {[r.request_id for r in out.preempted]}: a grows first and the newest (c) pays, then b cannot "
        f"grow and is itself the newest left"
    )
    assert list(s.waiting) == [b, c, d], (
        f"waiting is {[r.request_id for r in s.waiting]}: requests preempted in one step wait at the front of the "
        f"queue in their running order ({b.request_id}, {c.request_id}), ahead of {d.request_id} that never ran "
        "(first come, first served)"
    )


@pytest.mark.task("1.5")
def test_no_request_is_admitted_in_a_step_that_preempted():
    # Two 4-token prompts in 12 slots, a 4-token budget: on the fourth step the older one cannot grow and the
    # newer one is preempted; the budget left would let it (or anyone waiting) start again in that same step.
    s = scheduler(budget=4, seqs=8, capacity=12)
    older, newer = request(4, max_tokens=8), request(4, max_tokens=8)
    for r in (older, newer):
        s.add_request(r)
    for step in range(1, 9):
        waiting_before = list(s.waiting)
        out = s.schedule()
        if out.preempted:
            admitted = [c.request.request_id for c in out.chunks if c.request in waiting_before or c.request in out.preempted]
            assert not admitted, (
                f"step {step} preempted {[r.request_id for r in out.preempted]} and then admitted {admitted}: no request "
                "is admitted in a step that preempted one (schedule's rule: memory is tight, so the running requests "
                "drain first; admitting now preempts again next step)"
            )
            return
        s.update(out, {c.request.request_id: 7 for c in out.chunks if c.samples_next_token})
    pytest.fail("no step preempted: 12 slots cannot hold two requests of 4 prompt tokens growing together past 6 each")


@pytest.mark.task("1.6")
@given(waiting=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 100)), min_size=1, max_size=8))
@example(waiting=[(2, 5), (2, 1), (0, 0)])  # a request put back in front (preempted) ties with one that arrived before it
def test_lpm_order_puts_longer_prefixes_first_and_keeps_the_queue_order_among_equals(waiting):
    # waiting: (cached prefix length, arrival) in queue order; a request preempted is back in front of the queue
    # whatever its arrival, so the queue order and the arrival order can differ.
    requests = [request(12, arrival=arrival) for _, arrival in waiting]
    prefix = {r.request_id: n for r, (n, _) in zip(requests, waiting)}
    got = lpm_order(requests, lambda r: prefix[r.request_id])
    want = sorted(requests, key=lambda r: -prefix[r.request_id])  # longest first; a stable sort keeps the queue order
    assert [r.request_id for r in got] == [r.request_id for r in want], (
        f"lpm_order gave {[(r.request_id, prefix[r.request_id]) for r in got]} (id, cached prefix) for the queue "
        f"{[(r.request_id, prefix[r.request_id]) for r in requests]}: longest cached prefix first, and requests with "
        "equal prefixes keep their order in the queue (not their arrival: a preempted request waits in front)"
    )
    assert got is not requests, "lpm_order returns a new list: the queue itself keeps its order"


@pytest.mark.task("1.6")
@given(prefix_lens=st.lists(st.integers(0, 10), min_size=2, max_size=8), seqs=st.integers(1, 3))
def test_lpm_admits_longest_cached_prefix_first(prefix_lens, seqs):
    requests = [request(12, max_tokens=1) for _ in prefix_lens]
    oracle = {r.request_id: n for r, n in zip(requests, prefix_lens)}
    s = scheduler(budget=1000, seqs=seqs, policy="lpm", prefix_len=lambda r: oracle[r.request_id])
    for r in requests:
        s.add_request(r)
    admitted = [c.request for c in s.schedule().chunks]
    queue = [(r.request_id, oracle[r.request_id]) for r in requests]
    assert len(admitted) == min(seqs, len(requests)), (
        f"Task 1.6: admitted {len(admitted)} of {len(requests)} waiting requests with {seqs} seats, a budget of 1000 "
        f"and memory for all: LPM changes the order, not how many are admitted (queue (id, cached prefix): {queue})"
    )
    rest = [r for r in requests if r not in admitted]
    assert min(oracle[r.request_id] for r in admitted) >= max((oracle[r.request_id] for r in rest), default=0), (
        f"Task 1.6: LPM admitted {[(r.request_id, oracle[r.request_id]) for r in admitted]} (id, cached prefix) and left "
        f"{[(r.request_id, oracle[r.request_id]) for r in rest]} waiting: the longest cached prefixes go first"
    )
    ties = [r for r in requests if oracle[r.request_id] == oracle[admitted[-1].request_id]]
    assert [r for r in ties if r in admitted] == ties[: len([r for r in ties if r in admitted])], (
        f"Task 1.6: among the requests with {oracle[admitted[-1].request_id]} cached tokens "
        f"{[r.request_id for r in ties]} (queue order), LPM admitted {[r.request_id for r in ties if r in admitted]}: "
        "equal prefixes keep the queue order"
    )


@pytest.mark.task("1.5")
@given(abort_when=st.integers(0, 6), which=st.integers(0, 2))
@example(abort_when=0, which=2)  # abort a request that is still waiting
def test_abort_returns_all_memory(abort_when, which):
    s = scheduler(budget=6, seqs=2, capacity=60)
    driver = Driver(s, used_tokens=lambda: s.memory.num_used_tokens)
    requests = [request(5, max_tokens=6) for _ in range(3)]
    for r in requests:
        driver.add(r)
    for _ in range(abort_when):
        driver.step()
    victim = requests[which]
    was_unfinished = not victim.is_finished
    assert (s.abort(victim.request_id) is victim) == was_unfinished
    if was_unfinished:
        assert victim.finish_reason is FinishReason.ABORT and victim.status is RequestStatus.FINISHED, (
            f"an aborted request is FINISHED with reason ABORT, got {victim.status} and {victim.finish_reason}"
        )
    assert victim not in s.waiting and victim not in s.running, "an aborted request is in neither queue"
    assert s.abort(victim.request_id) is None, "aborting a finished request again returns None"
    driver.run_to_completion(max_steps=200)
    assert s.memory.num_used_tokens == 0
    assert s.abort("no-such-request") is None
    s.add_request(Request(victim.request_id, [1], 1))  # raises if the aborted request's id is still known


@pytest.mark.task("1.2")
def test_each_schedule_counts_itself():
    s = scheduler(budget=8)
    for _ in range(3):  # nothing to run: only admission (this task) is asked
        s.schedule()
    assert s.num_schedules == 3, (
        f"num_schedules is {s.num_schedules} after 3 schedules: schedule adds one to it before admitting anyone "
        "(admission_order's `now`, which bounds how long LPM may pass a request over, counts schedules)"
    )
    seen = []  # num_schedules while admission orders the queue: hold_shared_prefix asks the prefix oracle then
    config = SchedulerConfig(max_num_batched_tokens=8, max_num_seqs=8, hold_shared_prefix=True)
    counted = Scheduler(config, TokenCountingMemory(100), prefix_len=lambda r: seen.append(counted.num_schedules) or 0)
    counted.add_request(request(3))
    counted.schedule()
    assert seen == [1], (
        f"Task 1.2: admission ran on the first schedule with num_schedules {seen[:1]}, expected [1]: schedule counts "
        "itself before admitting anyone, so admission_order's `now` is this schedule (counted after admission, "
        "LPM's overdue requests come one schedule late)"
    )


@pytest.mark.task("1.2")
def test_a_request_that_could_never_run_is_refused_at_once():
    s = scheduler(capacity=10)
    too_big = request(10, max_tokens=4)  # may grow to 14 tokens: more than the whole pool
    with pytest.raises(ValueError, match=too_big.request_id):
        s.add_request(too_big)
    assert not s.has_unfinished(), "a refused request is not queued"
    just_fits = request(6, max_tokens=4)
    s.add_request(just_fits)  # 10 tokens at most: exactly the pool
    with pytest.raises(ValueError, match=just_fits.request_id):
        s.add_request(Request(just_fits.request_id, [1], 1))  # the id is in use
    assert list(s.waiting) == [just_fits], "a refused request changes nothing"
    out = s.schedule()
    assert [c.request for c in out.chunks] == [just_fits]
    try:
        s.add_request(Request(just_fits.request_id, [1], 1))
    except ValueError:
        pass
    else:
        pytest.fail(
            f"Task 1.2: add_request accepted a new request under the id {just_fits.request_id!r} of a request that is "
            "running: an id is in use while its request is unfinished, running as well as waiting"
        )
    assert list(s.running) == [just_fits] and not s.waiting, "a refused request changes nothing"


@pytest.mark.task("1.2")
def test_bad_requests_are_rejected_clearly():
    s = scheduler(capacity=10)
    too_big = request(10, max_tokens=4)
    with pytest.raises(ValueError, match=too_big.request_id):  # the contract: the message names the request
        s.add_request(too_big)
    with pytest.raises(ValueError, match="empty"):
        Request("x", [], 3)
    with pytest.raises(ValueError, match="max_tokens"):
        Request("x", [1], 0)
    with pytest.raises(ValueError, match="policy"):
        SchedulerConfig(policy="random")
