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
    # Nudge: neither the warm-up nor the clock of the day may decide which one wins.
    # Hint 1: Three things make a comparison unfair. A first run is slow (caches, lazy set-up):
    #   run it, but do not keep its time. A shared machine drifts: if every A ran before every B,
    #   a machine slowing down would make B look slower, so put an A and a B side by side, and
    #   compare each B with the A next to it. One run hit by an interrupt drags a mean along:
    #   use medians. Alternating ABBA rather than ABAB also cancels a steady drift within a pair.
    # Hint 2: Check the arguments first. Time a call as clock() after minus clock() before,
    #   appending its letter to the order. Do the warm-ups (A and B, `warmup` times each) and
    #   drop their times. Then for i in range(runs) time A then B on even i and B then A on odd
    #   i, keeping each time in its list. Medians of both lists; ratio = median_b / median_a;
    #   paired ratios b[i] / a[i]; their quartiles with statistics.quantiles(n=4,
    #   method="inclusive") give low (first) and high (third).
    # Hint 3:
    #   if runs < MIN_RUNS or warmup < 0: raise ValueError(...)
    #   order = []
    #   def timed(letter, fn): order.append(letter); t0 = clock(); fn(); return clock() - t0
    #   repeat warmup times: timed("A", run_a); timed("B", run_b)
    #   a, b = [], []
    #   for i in range(runs):
    #       pair = [("A", run_a, a), ("B", run_b, b)], reversed when i is odd
    #       for letter, fn, times in pair: times.append(timed(letter, fn))
    #   q = quantiles([y / x for x, y in zip(a, b)], n=4, method="inclusive")
    #   return Comparison(tuple(a), tuple(b), "".join(order), median(a), median(b),
    #                     median(b) / median(a), q[0], q[2])
    # BEGIN SOLUTION 5.17: A fair comparison
    if runs < MIN_RUNS or warmup < 0:
        raise ValueError(f"need runs >= {MIN_RUNS} and warmup >= 0, got runs={runs}, warmup={warmup}")
    order: list[str] = []

    def timed(letter: str, fn: Callable[[], object]) -> float:
        order.append(letter)
        start = clock()
        fn()
        return clock() - start

    for _ in range(warmup):
        timed("A", run_a)
        timed("B", run_b)
    a: list[float] = []
    b: list[float] = []
    for i in range(runs):
        pair = [("A", run_a, a), ("B", run_b, b)]
        for letter, fn, times in pair if i % 2 == 0 else pair[::-1]:
            times.append(timed(letter, fn))
    quartiles = statistics.quantiles([y / x for x, y in zip(a, b)], n=4, method="inclusive")
    median_a, median_b = statistics.median(a), statistics.median(b)
    return Comparison(tuple(a), tuple(b), "".join(order), median_a, median_b, median_b / median_a,
                      quartiles[0], quartiles[2])
    # END SOLUTION
# ANCHOR_END: compare
