"""How many CPU threads a model step gets when it runs off the process's main thread.

torch's OpenMP runtime (libgomp) makes every parallel region opened from a
thread other than the process's first one cost about 25 microseconds more
once the first one has opened regions too (it then manages more threads
than there are CPUs, and its idle workers sleep instead of spinning:
miniyaie/backends/cpu/runtime.py). Measured on the 2-core course machine (2026-11-25): the same one-row oneDNN
matmul took 33 us from the main thread with two threads, 78 us from another
thread with two, 48 us from it with one; our own OpenMP decode kernel 10 us
against 35 us. A decode step of a few rows opens about 250 such regions
(seven linear layers and attention in each of 30 layers), so on the engine
thread (InferenceEngine, the server) a small step runs faster on one thread:
one client's inter-token latency went from 30.5 to 22.9 ms. A step with more
rows needs every core (16 clients: 219 tok/s with two threads, 175 with one).

Intel's OpenMP runtime, which the commands preload when they can
(miniyaie/backends/cpu/runtime.py), has no such cost: there every step keeps all
threads (one client: 22.2 ms per token with two threads, 24.3 with one).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

from miniyaie.backends.cpu.runtime import intel_openmp_loaded

SMALL_STEP_TOKENS = 8  # up to this many tokens, a step off the main thread runs on one thread


@contextmanager
def threads_for_step(num_tokens: int, device: torch.device | str):
    """Run the block on one thread if it is a small CPU step off the main thread; otherwise as set."""
    small = num_tokens <= SMALL_STEP_TOKENS and torch.device(device).type == "cpu"
    if (not small or threading.current_thread() is threading.main_thread() or torch.get_num_threads() == 1
            or intel_openmp_loaded()):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
