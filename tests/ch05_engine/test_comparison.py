"""Task 5.17: a fair comparison, checked on a fake machine whose clock we own.

The fake machine's runs take the time we say: a slow first run, a machine
that slows down as it goes, one run hit by an interrupt, noise. Each test
is built so that one classic mistake (keeping the warm-ups, all A before
all B, means instead of medians) gives a wrong answer it names.
"""

import random
import statistics

import pytest

from miniyaie.cli import main
from miniyaie.engine.comparison import Comparison, compare


class FakeMachine:
    """Runners that advance a fake clock: run k (counted over A and B together) takes cost(name, k, nth)."""

    def __init__(self, cost):
        self.now, self.calls, self.cost = 0.0, [], cost

    def clock(self) -> float:
        return self.now

    def runner(self, name: str):
        def run():
            nth = self.calls.count(name)  # this runner's own call number
            self.now += self.cost(name, len(self.calls), nth)
            self.calls.append(name)
        return run

    def compare(self, **kwargs) -> Comparison:
        return compare(self.runner("A"), self.runner("B"), clock=self.clock, **kwargs)


@pytest.mark.task("5.17")
def test_the_docstrings_example():
    result = FakeMachine(lambda name, k, nth: 1.0 if name == "A" else 2.0).compare(runs=3, warmup=1)
    assert result.a_seconds == (1.0, 1.0, 1.0) and result.b_seconds == (2.0, 2.0, 2.0)
    assert (result.median_a, result.median_b, result.ratio, result.low, result.high) == (1.0, 2.0, 2.0, 2.0, 2.0)
    assert not result.within_noise
    assert sorted(result.order) == list("AAAABBBB")


@pytest.mark.task("5.17")
def test_warm_up_runs_are_run_and_their_times_left_out():
    machine = FakeMachine(lambda name, k, nth: 50.0 if nth < 3 else 1.0)  # each runner's first three calls are slow
    result = machine.compare(runs=3, warmup=3)
    assert machine.calls.count("A") == machine.calls.count("B") == 6, "each runner is called warmup + runs times"
    assert result.a_seconds == (1.0, 1.0, 1.0) and result.b_seconds == (1.0, 1.0, 1.0), (
        f"kept times {result.a_seconds}, {result.b_seconds}: the warm-ups' times (50 s, cold) must be left out"
    )
    assert result.order == "".join(machine.calls), "order records every call as it ran"


@pytest.mark.task("5.17")
def test_the_measured_runs_are_side_by_side_pairs_that_take_turns_going_first():
    machine = FakeMachine(lambda name, k, nth: 1.0)
    result = machine.compare(runs=6, warmup=2)
    measured = "".join(machine.calls[4:])
    assert measured == "ABBAABBAABBA", (
        f"measured runs in the order {measured}: pair i runs A first when i is even, B first when odd (all of A "
        "then all of B lets the machine's drift decide; always A first makes B always the later, slower-looking one)"
    )
    assert result.order == "".join(machine.calls) and sorted(result.order[:4]) == list("AABB")


@pytest.mark.task("5.17")
def test_a_machine_that_slows_down_as_it_goes_favours_neither():
    """Identical work; every run is 2% slower than the one before (a machine heating up, a neighbour starting)."""
    machine = FakeMachine(lambda name, k, nth: 1.0 + 0.02 * k)
    result = machine.compare(runs=10, warmup=1)
    assert result.ratio == pytest.approx(1.0, abs=0.005), (
        f"B/A = {result.ratio:.3f} for identical work on a drifting machine: the runs that came later look slower; "
        "alternate A and B, and let each pair take turns going first"
    )
    assert result.within_noise, f"paired ratios' quartiles {result.low:.3f}..{result.high:.3f} leave out 1"


@pytest.mark.task("5.17")
def test_one_interrupted_run_moves_neither_median():
    machine = FakeMachine(lambda name, k, nth: 30.0 if (name, nth) == ("A", 4) else 1.0)  # A's 4th measured run
    result = machine.compare(runs=9, warmup=1)
    assert 30.0 in result.a_seconds
    assert (result.median_a, result.median_b, result.ratio) == (1.0, 1.0, 1.0), (
        f"medians {result.median_a}, {result.median_b}: one interrupted run of 30 s must not move the typical time "
        "(a mean does: use medians)"
    )
    assert statistics.median(result.a_seconds) == result.median_a
    assert result.within_noise


def _noisy(slowdown: float, seed: int = 0):
    rng = random.Random(seed)
    return lambda name, k, nth: (slowdown if name == "B" else 1.0) * rng.uniform(0.95, 1.05)


@pytest.mark.task("5.17")
def test_a_real_difference_stands_out_of_the_noise_and_a_tiny_one_does_not():
    slower = FakeMachine(_noisy(1.2)).compare(runs=15, warmup=1)
    assert slower.ratio == pytest.approx(1.2, abs=0.06) and slower.low > 1.0 and not slower.within_noise
    same = FakeMachine(_noisy(1.005)).compare(runs=15, warmup=1)
    assert same.low < 1.0 < same.high and same.within_noise, (
        f"B 0.5% slower under ±5% noise: quartiles {same.low:.3f}..{same.high:.3f} should hold 1"
    )
    pairs = sorted(b / a for a, b in zip(slower.a_seconds, slower.b_seconds))  # 15 ratios: quartiles at 3.5 and 10.5
    assert (slower.low, slower.high) == pytest.approx(((pairs[3] + pairs[4]) / 2, (pairs[10] + pairs[11]) / 2)), (
        "low and high are the quartiles of the paired ratios b/a (inclusive method)"
    )


@pytest.mark.task("5.17")
def test_bad_arguments_are_refused_before_anything_runs_and_the_edges_are_accepted():
    machine = FakeMachine(lambda name, k, nth: 1.0)
    for kwargs in (dict(runs=2), dict(runs=0), dict(runs=5, warmup=-1)):
        with pytest.raises(ValueError):
            machine.compare(**kwargs)
    assert machine.calls == []
    result = machine.compare(runs=3, warmup=0)  # no warm-up at all is a choice the caller may make
    assert result.order == "ABBAAB" and len(result.a_seconds) == 3


@pytest.mark.task("5.17")
def test_bench_compare_runs_two_commands_through_the_fair_comparison(tmp_path, capsys):
    log = tmp_path / "order"
    argv = ["bench", "compare", f"printf A >> {log}", f"printf B >> {log}", "--runs", "3", "--warmup", "1",
            "--names", "first,second"]
    assert main(argv) == 0
    assert log.read_text() == "AB" + "ABBAAB", "the command's runs are the comparison's: warm-ups, then pairs taking turns"
    out = capsys.readouterr().out
    assert "first: median" in out and "second/first =" in out
