"""A fair comparison of two ways to do the same work: which is faster, by how much, and whether that is noise (Task 5.17).

`miniyaie bench compare "command A" "command B"` runs two commands with it
(bench/compare.py); any two callables will do. The machine is not a
constant: its first run pays for cold caches and lazy set-up, and a shared
machine speeds up and slows down while you measure. The comparison has to
be built so that neither of those can decide the answer.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

MIN_RUNS = 3  # fewer pairs than this cannot tell a difference from noise


@dataclass(frozen=True)
class Comparison:
    a_seconds: tuple[float, ...]  # A's measured runs, in the order they ran (warm-ups left out)
    b_seconds: tuple[float, ...]
    order: str  # every run in the order it ran, warm-ups included: e.g. "ABABBA"
    median_a: float
    median_b: float
    ratio: float  # median_b / median_a: how many times A's time B takes
    low: float  # the lower and upper quartile of the ratios b/a of runs made side by side
    high: float

    @property
    def within_noise(self) -> bool:
        """Whether "no difference" is a fair reading: 1 lies between the quartiles of the paired ratios."""
        return self.low <= 1.0 <= self.high

    def summary(self, a: str = "A", b: str = "B") -> str:
        verdict = "within noise" if self.within_noise else ("B slower" if self.ratio > 1 else "B faster")
        return (f"{a}: median {self.median_a:.4g} s; {b}: median {self.median_b:.4g} s over {len(self.a_seconds)} runs each, "
                f"alternated; {b}/{a} = {self.ratio:.3f} (paired quartiles {self.low:.3f}..{self.high:.3f}): {verdict}")


# ANCHOR: compare
def compare(run_a: Callable[[], object], run_b: Callable[[], object], runs: int = 10, warmup: int = 1,
            clock: Callable[[], float] = time.perf_counter) -> Comparison:
    """Time `run_a` and `run_b` (each called with no arguments) fairly; returns the Comparison.

    Each is called warmup + runs times; a run's time is clock() after it minus
    clock() before it. The first `warmup` calls of each are not measured
    results (a_seconds and b_seconds hold `runs` times each). The measured runs
    come in pairs made side by side, taking turns going first: pair i is A then
    B when i is even, B then A when odd ("ABBAAB..."), so that a machine
    drifting over time weighs on both alike. Typical times are medians (one interrupted run does
    not move them); ratio = median_b / median_a; low and high are the lower
    and upper quartiles (statistics.quantiles, n=4, method="inclusive") of the
    runs' paired ratios b/a. `order` records every call, warm-ups included.
    Raises ValueError if runs < MIN_RUNS or warmup < 0, before running anything.

    Example (asserted by the tests): A always takes 1 s, B 2 s, runs=3,
    warmup=1: a_seconds (1.0, 1.0, 1.0), b_seconds (2.0, 2.0, 2.0), ratio 2.0,
    low = high = 2.0, within_noise False; `order` has 4 A and 4 B.
    """
    # Idea: neither the warm-up nor the clock of the day may decide which one wins.
    # Stuck? `miniyaie hint 5.17` prints hints, one level at a time.
    # TODO(Task 5.17): A fair comparison. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 17: A fair comparison — see book/src/ch05_performance.md')
# ANCHOR_END: compare
