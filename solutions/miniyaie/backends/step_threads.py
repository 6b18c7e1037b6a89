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

Those rules are a prior, not the answer: a core can be taken by another job.
Every parallel region then waits for the thread that shares the busy core,
and two threads run slower than one (measured on a 2-core Xeon host with one
core spinning, 2026-11-28: one client 121.5 ms per token on two threads, 60.6
on one; 42.2 on two with both cores free). So a runner keeps a `ThreadChoice`:
per step size, the time per token of recent steps on one thread and on all of
them, each step taking the faster and every `explore_every`-th step trying
the other, so that the choice follows the machine as it changes.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from miniyaie.backends.cpu.runtime import intel_openmp_loaded

SMALL_STEP_TOKENS = 8  # up to this many tokens, a step off the main thread runs on one thread


def prior_threads(num_tokens: int, threads: int) -> int:
    """The thread count the rules above give a CPU step of num_tokens tokens when `threads` are set."""
    small = num_tokens <= SMALL_STEP_TOKENS and threading.current_thread() is not threading.main_thread()
    return 1 if small and not intel_openmp_loaded() else threads


@dataclass
class _SizeState:
    seconds_per_token: dict[int, float] = field(default_factory=dict)  # thread count -> recent average
    step: int = 0
    next_try: int = 0  # the step at which the count that is not the best runs again
    interval: int = 0


class ThreadChoice:
    """For each step size (tokens, by powers of two) and thread (main or not): run on one thread or on all?

    Starts from prior_threads; afterwards takes the count whose recent steps took less time per token
    (an exponential average), and runs the other again after `explore_every` steps of that size, twice as
    long after each try that confirms the choice (up to `max_interval`). A machine that gets slower is
    seen at once (the average of the count in use rises); one that gets faster, at the next try.
    """

    def __init__(self, explore_every: int = 16, max_interval: int = 256, smoothing: float = 0.3):
        self.explore_every, self.max_interval, self.smoothing = explore_every, max_interval, smoothing
        self._sizes: dict[tuple[int, bool], _SizeState] = {}
        self.explored = 0  # steps run on the count that was not the best, to measure it again

    def _state(self, num_tokens: int) -> _SizeState:
        key = (num_tokens.bit_length(), threading.current_thread() is threading.main_thread())
        return self._sizes.setdefault(key, _SizeState(interval=self.explore_every))

    def pick(self, num_tokens: int, threads: int) -> int:
        state = self._state(num_tokens)
        state.step += 1
        prior, known = prior_threads(num_tokens, threads), state.seconds_per_token
        if threads == 1 or prior not in known:
            return prior if threads > 1 else 1
        other = threads if prior == 1 else 1
        if other not in known:
            self.explored += 1
            return other
        best = min((1, threads), key=known.get)
        if state.step >= state.next_try:
            self.explored += 1
            return threads if best == 1 else 1
        return best

    def record(self, num_tokens: int, threads: int, seconds: float) -> None:
        state = self._state(num_tokens)
        best_before = min(state.seconds_per_token, key=state.seconds_per_token.get, default=threads)
        per_token, last = seconds / max(num_tokens, 1), state.seconds_per_token.get(threads)
        state.seconds_per_token[threads] = per_token if last is None else last + self.smoothing * (per_token - last)
        if state.step >= state.next_try and threads != best_before:  # a try of the other count
            best_now = min(state.seconds_per_token, key=state.seconds_per_token.get)
            state.interval = min(2 * state.interval, self.max_interval) if best_now == best_before else self.explore_every
            state.next_try = state.step + state.interval


@contextmanager
def threads_for_step(num_tokens: int, device: torch.device | str, choice: ThreadChoice | None = None):
    """Run the block on the threads a CPU step of num_tokens should get: `choice`'s pick, timed back into it,
    or without one the prior (one thread for a small step off the main thread). Other devices: as set."""
    if torch.device(device).type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    use = choice.pick(num_tokens, threads) if choice is not None else prior_threads(num_tokens, threads)
    if use != threads:
        torch.set_num_threads(use)
    started = time.perf_counter()
    try:
        yield
    finally:
        if choice is not None:
            choice.record(num_tokens, use, time.perf_counter() - started)
        if use != threads:
            torch.set_num_threads(threads)
