"""A small CPU step off the main thread starts on one thread, everything else on the threads it was given; then each
step size runs on the count that was faster lately (ThreadChoice), measuring the other now and then."""

import threading

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from miniyaie.backends.cpu.runtime import intel_openmp_loaded
from miniyaie.backends.step_threads import SMALL_STEP_TOKENS, ThreadChoice, threads_for_step

pytestmark = pytest.mark.ungraded


def threads_inside(num_tokens: int, device: str = "cpu") -> int:
    with threads_for_step(num_tokens, device):
        return torch.get_num_threads()


@pytest.mark.skipif(intel_openmp_loaded(), reason="Intel's OpenMP runtime is loaded: every step keeps its threads there")
def test_only_small_cpu_steps_off_the_main_thread_get_one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen = {}

        def engine_thread():
            seen["small"] = threads_inside(SMALL_STEP_TOKENS)
            seen["after"] = torch.get_num_threads()
            seen["large"] = threads_inside(SMALL_STEP_TOKENS + 1)
            seen["gpu"] = threads_inside(1, "meta")

        worker = threading.Thread(target=engine_thread)
        worker.start()
        worker.join()
        assert seen == {"small": 1, "after": 2, "large": 2, "gpu": 2}, seen
        assert threads_inside(1) == 2, "the main thread keeps its threads (its parallel regions are cheap)"
    finally:
        torch.set_num_threads(before)


def simulate(choice: ThreadChoice, cost: dict[int, float], steps: int, num_tokens: int = 1) -> list[int]:
    """`steps` steps through choice's pick and record, each costing cost[threads] per token; the counts used."""
    used = []
    for _ in range(steps):
        threads = choice.pick(num_tokens, 2)
        used.append(threads)
        choice.record(num_tokens, threads, cost[threads] * num_tokens)
    return used


@given(one=st.floats(0.5, 3.0), two=st.floats(0.5, 3.0), num_tokens=st.sampled_from([1, 3, 8, 40, 300]))
@example(one=1.0, two=2.0, num_tokens=1).via("a core taken by another job: two threads twice as slow")
@example(one=2.0, two=1.0, num_tokens=300).via("a quiet machine: a large step twice as fast on two")
def test_the_faster_thread_count_runs_nearly_every_step(one, two, num_tokens):
    assume(abs(one - two) > 0.05 * min(one, two))
    choice = ThreadChoice()
    used = simulate(choice, {1: one, 2: two}, 640, num_tokens)
    slower = 1 if one > two else 2
    assert used.count(slower) <= 640 // 32 + 2, (
        f"one thread costs {one}, two {two} per token: the slower count ran {used.count(slower)} of 640 steps; "
        "it should run only to be measured again, ever more rarely while it stays slower")


def test_the_choice_follows_the_machine_when_it_changes():
    """Another job takes a core, then leaves: the choice moves to one thread at once (the count in use gets
    slower) and back at the next try of two threads (tries at most max_interval steps apart)."""
    choice = ThreadChoice(explore_every=4, max_interval=16)
    assert simulate(choice, {1: 2.0, 2: 1.0}, 64)[-8:].count(2) >= 7, "a quiet machine: two threads"
    busy = simulate(choice, {1: 2.0, 2: 4.0}, 64)
    assert busy[2:8] == [1] * 6 and busy[-8:].count(1) >= 7, f"a busy core: one thread within two steps ({busy})"
    quiet = simulate(choice, {1: 2.0, 2: 1.0}, 64)
    assert quiet[-8:].count(2) >= 7, f"the core is free again: two threads ({quiet})"


def test_step_sizes_are_chosen_apart_and_a_choice_sets_and_times_the_threads_it_picked():
    choice = ThreadChoice(explore_every=4, max_interval=8)
    small = simulate(choice, {1: 1.0, 2: 3.0}, 40, num_tokens=1)
    large = simulate(choice, {1: 3.0, 2: 1.0}, 40, num_tokens=256)
    assert small[-8:].count(1) >= 7 and large[-8:].count(2) >= 7, f"one thread for one token, two for 256: {small}, {large}"

    class OneThread(ThreadChoice):
        def pick(self, num_tokens, threads):
            return 1

        def record(self, num_tokens, threads, seconds):
            self.recorded = (num_tokens, threads, seconds)

    one = OneThread()
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with threads_for_step(256, "cpu", one):
            inside = torch.get_num_threads()
        assert inside == 1 and torch.get_num_threads() == 2, "the step runs on the pick; the threads set before come back"
        assert one.recorded[:2] == (256, 1) and one.recorded[2] > 0, "the step's time goes back to the choice"
    finally:
        torch.set_num_threads(before)
