"""The scheduler under random workloads: every invariant after every step (end to end, all tasks)."""

import pytest
from fake_model import EOS, Driver, reference_output
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from miniyaie.scheduler import FinishReason, Request, Scheduler, SchedulerConfig, TokenCountingMemory

pytestmark = [pytest.mark.task(f"1.{n}") for n in range(1, 9)]

workloads = st.fixed_dictionaries(
    dict(
        budget=st.integers(1, 48),
        seqs=st.integers(1, 6),
        spare_memory=st.integers(0, 60),  # memory beyond the largest request
        policy=st.sampled_from(["fcfs", "lpm"]),
        long_prefill=st.sampled_from([(0, 1), (4, 1), (8, 2)]),  # (long_prefill_token_threshold, max_long_partial_prefills)
        requests=st.lists(
            st.tuples(st.integers(0, 12), st.integers(1, 30), st.integers(1, 12), st.booleans()),  # arrival step, prompt, max tokens, stop at EOS
            min_size=1,
            max_size=10,
        ),
    )
)


def run_workload(budget, seqs, spare_memory, policy, requests, long_prefill=(0, 1)):
    capacity = max(p + m for _, p, m, _ in requests) + spare_memory
    memory = TokenCountingMemory(capacity)
    threshold, max_long = long_prefill
    config = SchedulerConfig(budget, seqs, policy, long_prefill_token_threshold=threshold, max_long_partial_prefills=max_long)
    s = Scheduler(config, memory, prefix_len=lambda r: len(r.prompt_token_ids) % 5)
    driver = Driver(s, used_tokens=lambda: memory.num_used_tokens)
    made = []
    for step in range(200):
        for i, (arrival, prompt_len, max_tokens, stop_at_eos) in enumerate(requests):
            if arrival == step:
                prompt = [(3 * i + 5 * j) % 49 + 1 for j in range(prompt_len)]
                r = Request(f"r{i}", prompt, max_tokens, eos_token_ids=[EOS], ignore_eos=not stop_at_eos)
                driver.add(r)
                made.append(r)
        if step > max(a for a, *_ in requests) and not s.has_unfinished():
            break
        if s.has_unfinished():
            driver.step()
    driver.run_to_completion(max_steps=20 * sum(p + m for _, p, m, _ in requests) + 50)
    return driver, made, memory


@given(workloads)
@example(dict(budget=1, seqs=4, spare_memory=10, policy="fcfs", requests=[(0, 3, 2, False), (0, 4, 3, False)]))  # budget 1
@example(dict(budget=4, seqs=2, spare_memory=0, policy="fcfs", requests=[(0, 17, 3, False)]))  # prompt longer than the budget
@example(dict(budget=32, seqs=6, spare_memory=0, policy="fcfs", requests=[(0, 10, 8, False)] * 4))  # memory for exactly one request
@example(dict(budget=48, seqs=6, spare_memory=60, policy="lpm", requests=[(0, 5, 5, True)] * 6))  # all arrive at once
@example(dict(budget=16, seqs=4, spare_memory=0, policy="fcfs", long_prefill=(4, 1), requests=[(0, 30, 4, False), (0, 30, 4, False), (1, 3, 2, False)]))  # tight memory, long prompts
def test_random_workloads_keep_every_invariant(workload):
    driver, made, memory = run_workload(**workload)
    for r in made:
        assert r.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
        expected = reference_output(r.prompt_token_ids, r.max_tokens, ignore_eos=r.ignore_eos)
        assert r.output_token_ids == expected, "preemption and batching never change the output"
    assert memory.num_used_tokens == 0
    if workload["policy"] == "fcfs":
        arrival = sorted(made, key=lambda r: (workload["requests"][int(r.request_id[1:])][0], int(r.request_id[1:])))
        threshold = workload.get("long_prefill", (0, 1))[0]
        is_long = lambda r: 0 < threshold < len(r.prompt_token_ids)  # noqa: E731
        for long in (False, True):  # with the long-prefill bound on, a short prompt may pass a long one
            kind = [r.request_id for r in arrival if is_long(r) == long]
            first = [rid for rid in driver.trace.first_admissions if rid in kind]
            assert first == kind, "FCFS admits in arrival order (with the long-prefill bound: the short and the long among themselves)"


class SchedulerMachine(RuleBasedStateMachine):
    """Random arrivals, steps and aborts against a model of what must hold."""

    @initialize(
        budget=st.integers(1, 24), seqs=st.integers(1, 4), capacity=st.integers(20, 60),
        threshold=st.sampled_from([0, 2, 5]), max_long=st.integers(1, 2),
    )
    def setup(self, budget, seqs, capacity, threshold, max_long):
        self.memory = TokenCountingMemory(capacity)
        config = SchedulerConfig(budget, seqs, long_prefill_token_threshold=threshold, max_long_partial_prefills=max_long)
        self.scheduler = Scheduler(config, self.memory)
        self.driver = Driver(self.scheduler, used_tokens=lambda: self.memory.num_used_tokens)
        self.made: list[Request] = []

    @rule(prompt_len=st.integers(1, 12), max_tokens=st.integers(1, 8))
    def arrive(self, prompt_len, max_tokens):
        r = Request(f"r{len(self.made)}", [(j * 11 + len(self.made)) % 49 + 1 for j in range(prompt_len)], max_tokens, ignore_eos=True)
        self.driver.add(r)
        self.made.append(r)

    @precondition(lambda self: self.scheduler.has_unfinished())
    @rule()
    def step(self):
        self.driver.step()

    @precondition(lambda self: self.made)
    @rule(data=st.data())
    def abort(self, data):
        r = data.draw(st.sampled_from(self.made))
        self.scheduler.abort(r.request_id)
        assert r.is_finished

    @invariant()
    def memory_is_bounded_and_unfinished_requests_are_queued(self):
        if not hasattr(self, "scheduler"):
            return
        assert self.memory.num_used_tokens <= self.memory.capacity_tokens
        queued = list(self.scheduler.waiting) + list(self.scheduler.running)
        assert sorted(r.request_id for r in queued) == sorted(r.request_id for r in self.made if not r.is_finished)

    def teardown(self):
        if not hasattr(self, "scheduler"):
            return
        self.driver.run_to_completion(max_steps=2000)
        assert self.memory.num_used_tokens == 0, "every block comes back"
        for r in self.made:
            if r.finish_reason is not FinishReason.ABORT:
                assert r.output_token_ids == reference_output(r.prompt_token_ids, r.max_tokens)


def test_scheduler_state_machine():
    run_state_machine_as_test(SchedulerMachine, settings=settings(max_examples=60, stateful_step_count=40))
