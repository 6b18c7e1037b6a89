"""A small CPU step off the main thread runs on one thread; everything else keeps the threads it was given."""

import threading

import pytest
import torch

from miniyaie.backends.cpu.runtime import intel_openmp_loaded
from miniyaie.backends.step_threads import SMALL_STEP_TOKENS, threads_for_step

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
