"""Admission that does not thrash, LPM that cannot starve, and the in-batch shared-prefix hold.

All through the scheduler's public interface with chapter 1's counting
memory (or a prefix oracle standing in for a prefix cache).
"""

import itertools

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.scheduler import Request, Scheduler, SchedulerConfig, TokenCountingMemory

_ids = itertools.count()


def request(prompt, max_tokens=4) -> Request:
    prompt = list(range(1, prompt + 1)) if isinstance(prompt, int) else prompt
    return Request(f"q{next(_ids)}", prompt, max_tokens, ignore_eos=True)


def run_to_end(s: Scheduler) -> int:
    steps = 0
    while s.has_unfinished():
        out = s.schedule()
        s.update(out, {c.request.request_id: 1 for c in out.chunks if c.samples_next_token})
        steps += 1
        assert steps < 10_000, "the scheduler stopped making progress"
    return steps


@pytest.mark.task("1.2")
def test_admission_keeps_the_decode_reserve():
    # First step only (Task 1.2 is graded before Task 1.3): three requests arrive
    # together at a pool of 100 slots; each may still produce 40 tokens.
    s = Scheduler(SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, decode_reserve=0.5), TokenCountingMemory(100))
    first, second, third = request(10, 40), request(10, 40), request(30, 40)
    for r in (first, second, third):
        s.add_request(r)
    out = s.schedule()
    # first: 10 + 0.5 * 40 = 30 <= 100; second: 10 + 10 + 0.5 * 80 = 60 <= 100;
    # third: its 30 tokens fit in the 80 free slots, but 20 + 30 + 0.5 * 120 = 110 do not.
    assert [c.request for c in out.chunks] == [first, second]
    assert third in s.waiting and third.num_computed_tokens == 0
    zero = Scheduler(SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8), TokenCountingMemory(100))
    for r in (request(10, 40), request(10, 40), request(30, 40)):
        zero.add_request(r)
    assert len(zero.schedule().chunks) == 3, "without a reserve, admit as soon as the chunk fits (chapter 1's rule)"


@given(
    lens=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30)), min_size=1, max_size=25),
    capacity=st.integers(60, 200),
)
@example(lens=[(30, 30)] * 10, capacity=60)
def test_a_reserve_never_deadlocks_and_a_full_one_never_preempts(lens, capacity):
    def preemptions(ratio):
        s = Scheduler(SchedulerConfig(64, 16, decode_reserve=ratio), TokenCountingMemory(capacity))
        for p, n in lens:
            s.add_request(request(p, n))
        run_to_end(s)
        return s.num_preemptions

    assert preemptions(1.0) == 0, "reserving every token to come never preempts"
    preemptions(0.3)  # runs to the end: a reserve never blocks the queue for good


def test_lpm_falls_back_to_fcfs_on_long_queues():
    calls = []

    def oracle(r):
        calls.append(r)
        return len(r.prompt_token_ids)

    config = SchedulerConfig(max_num_batched_tokens=8, max_num_seqs=1, policy="lpm", lpm_max_queue=3)
    s = Scheduler(config, TokenCountingMemory(10_000), prefix_len=oracle)
    reqs = [request(n, 1) for n in (2, 3, 4, 5)]
    for r in reqs:
        s.add_request(r)
    out = s.schedule()  # 4 waiting > 3: FCFS, no sorting by prefix match
    assert out.chunks[0].request is reqs[0]


def test_lpm_cannot_starve_a_request_that_never_matches():
    # a stream of requests with long cached prefixes keeps arriving; the unmatched one still runs
    config = SchedulerConfig(max_num_batched_tokens=4, max_num_seqs=1, policy="lpm", max_wait_steps=5)
    s = Scheduler(config, TokenCountingMemory(10_000), prefix_len=lambda r: 0 if r.prompt_token_ids[0] == 99 else 3)
    lonely = request([99, 1, 2, 3], 1)
    s.add_request(lonely)
    for step in range(40):
        s.add_request(request(4, 1))
        out = s.schedule()
        s.update(out, {c.request.request_id: 1 for c in out.chunks if c.samples_next_token})
        if lonely.is_finished:
            break
    assert lonely.is_finished, "the request that never matches ran within max_wait_steps (+ the running one)"
    assert step <= 5 + 4


def test_requests_sharing_a_prefix_wait_for_the_first_to_compute_it():
    cached: set[tuple] = set()  # a stand-in prefix cache: prefixes of finished prefills

    class PrefixMemory(TokenCountingMemory):
        block_size = 4

        def cached_prefix_len(self, r):
            return max((len(p) for p in cached if tuple(r.prompt_token_ids[: len(p)]) == p), default=0)

    memory = PrefixMemory(10_000)
    config = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, hold_shared_prefix=True)
    s = Scheduler(config, memory)
    prefix = list(range(100, 120))  # 20 shared tokens = 5 blocks of 4
    group = [request(prefix + [i, i + 1], 2) for i in range(3)]
    other = request([7] * 10, 2)
    for r in group + [other]:
        s.add_request(r)
    out = s.schedule()
    assert [c.request for c in out.chunks] == [group[0], other], "the rest of the group waits for the prefix"
    assert s.stats()["num_held_for_prefix"] == 2
    s.update(out, {c.request.request_id: 1 for c in out.chunks if c.samples_next_token})
    cached.add(tuple(prefix))
    out = s.schedule()
    admitted = [c for c in out.chunks if c.request in group[1:]]
    assert [c.start for c in admitted] == [20, 20], "they start after the cached prefix"
    run_to_end(s)
