"""`miniyaie challenge N`: every chapter has one, a score is refused while correctness tests fail, the table prints.

No test here asserts a score: a score is the learner's, and the reference's may change with it.
"""

import dataclasses
import math
from pathlib import Path

import pytest

from miniyaie.challenges import base, runner
from miniyaie.challenges.base import Challenge, challenge_for, chapters_with_challenges
from miniyaie.cli.main import main

pytestmark = pytest.mark.ungraded
REPO = Path(__file__).resolve().parents[2]
ONE_FAST_TEST = "tests/ch01_scheduler/test_update.py::test_requests_finishing_together_come_back_in_chunk_order"


@pytest.mark.parametrize("number", range(12))
def test_every_chapter_has_a_well_formed_challenge(number):
    assert number in chapters_with_challenges(), (
        f"chapter {number} has no challenge: add solutions/miniyaie/challenges/ch{number:02d}_<topic>.py with CHALLENGE"
    )
    ch = challenge_for(number)
    assert isinstance(ch, Challenge) and ch.number == number
    assert ch.title and ch.metric and ch.unit and ch.workload, "a challenge states its problem, metric, unit and workload"
    assert callable(ch.run) and (ch.baseline is None or callable(ch.baseline))
    assert ch.correctness_tests, "a score counts only after correctness tests pass: name them"
    for path in ch.correctness_tests:
        file = path.split("::")[0]
        assert (REPO / file).exists(), f"chapter {number}'s correctness test {path} does not exist"
        assert file.startswith(f"tests/ch{number:02d}_"), f"{path} is not one of chapter {number}'s tests"


def test_a_chapter_without_a_challenge_is_refused_by_name():
    with pytest.raises(ValueError, match="no challenge"):
        challenge_for(42)


@pytest.mark.parametrize("number", [1, 2, 3, 11])
def test_cheap_workloads_score_the_same_twice(number):
    """The simulated scores are deterministic (run in this process with the reference selected), and the baseline
    is not the reference: there is something to beat."""
    ch = challenge_for(number)
    first = [ch.run(), (ch.reference or ch.run)(), ch.baseline()]
    assert all(isinstance(x, float) and math.isfinite(x) for x in first), first
    assert first == [ch.run(), (ch.reference or ch.run)(), ch.baseline()]
    assert first[1] != first[2], f"chapter {number}'s baseline scores what its reference scores ({first[1]})"


def _fast(number: int) -> Challenge:
    return dataclasses.replace(challenge_for(number), correctness_tests=[ONE_FAST_TEST])


def test_the_table_shows_baseline_yours_and_reference(monkeypatch, capsys):
    monkeypatch.setattr(runner, "challenge_for", lambda n: _fast(1))
    assert runner.challenge(1, "solutions") == 0
    out = capsys.readouterr().out
    for word in ("baseline", "yours", "reference", "lower is better", "simulated ms"):
        assert word in out, f"{word!r} missing from the challenge table:\n{out}"


def test_a_score_is_refused_when_a_correctness_test_fails(monkeypatch, capsys):
    """The stub tree fails the correctness test: no child process runs, the failing test is named."""
    monkeypatch.setattr(runner, "challenge_for", lambda n: _fast(1))
    monkeypatch.setattr(runner, "score_in_child", lambda *a, **k: pytest.fail("scored despite a failing test"))
    assert runner.challenge(1, "scheduler=chapters") == 1
    out = capsys.readouterr().out
    assert "No score" in out and ONE_FAST_TEST in out, out


def test_the_learners_design_module_is_optional(monkeypatch):
    """A chapter whose package has no challenge.py in the selected tree, or one that does not define the name, scores
    its default design."""
    assert base.learner_design(9, "make_proposer", "default") == "default", (
        "a challenge.py that defines no make_proposer (the reference's speculative/challenge.py) did not give the default")
    monkeypatch.setitem(base.CHAPTER_PACKAGES, 9, "bench")  # a package with no challenge.py
    assert base.learner_design(9, "make_proposer", "default") == "default", "a package without challenge.py did not give the default"


def test_chapter_1s_reference_entry_stays_in_solutions_and_an_inf_score_says_why():
    """The reference's settings live in solutions/miniyaie/scheduler/challenge.py (the reference column runs it), not in
    the harness the learner reads, and sync never copies them into chapters/; a design below the throughput floor
    scores inf and the line under the table gives its throughput and the floor."""
    from miniyaie.challenges import ch01_scheduler as ch01
    from miniyaie.course.sync import generated_tree
    from miniyaie.scheduler import Scheduler, SchedulerConfig

    assert base.learner_design(1, "make_scheduler", None) is not None, "the reference tree has no scheduler/challenge.py"
    harness = Path(ch01.__file__).read_text()
    assert "long_prefill_token_threshold=" not in harness, "the harness module carries the reference's settings"
    assert "scheduler/challenge.py" not in generated_tree(), "course sync copies the reference's challenge entry into chapters/"
    starved = lambda memory: Scheduler(SchedulerConfig(max_num_batched_tokens=24, max_num_seqs=64), memory)  # noqa: E731
    score = ch01._score(starved)
    note = ch01.CHALLENGE.explain(score)
    assert score == float("inf") and "below the 95% floor" in note and "% of the plain scheduler's" in note, (score, note)
    assert "the floor is 95%" in ch01.CHALLENGE.explain(ch01._score(ch01.plain_scheduler))


@pytest.mark.parametrize("number, harness_name, entry, design_marks", [
    (0, "ch00_kv_footprint", "model/challenge.py", ["232", "contiguous region"]),
    (2, "ch02_paged_pool", "paged/challenge.py", ["decode_reserve=0.2", "// 24"]),
    (4, "ch04_decode_kernel", "kernels/challenge.py", ["default_num_splits", "80%"]),
    (5, "ch05_sampler", "engine/challenge.py", ["sample_top_columns", "40%"]),
    (6, "ch06_histograms", "api/challenge.py", ["7.8%", "log scale"]),
    (7, "ch07_control_plane", "distributed/challenge.py", ["int32", "377"]),
    (8, "ch08_schemas", "structured/challenge.py", ["np.unique", "Moore"]),
    (9, "ch09_proposer", "speculative/challenge.py", ["most recent", "3.935", "4.55"]),
    (11, "ch11_adapter_residency", "lora/challenge.py", ["CostAwareReads", "HALF_LIFE", "Smith's rule"]),
    (10, "ch10_block_search", "quant/challenge.py", ["SHRINK", "make_qkx", "least squares"]),
])
def test_a_reference_entry_stays_in_solutions(number, harness_name, entry, design_marks):
    """The reference's design lives in its package's challenge.py (the reference column runs it, or the chapter code it
    describes), not in the harness module the learner reads; sync never copies it into chapters/."""
    import importlib

    from miniyaie.course.sync import generated_tree

    harness = Path(importlib.import_module(f"miniyaie.challenges.{harness_name}").__file__).read_text()
    assert (Path(base.__file__).parents[1] / entry).is_file(), f"the reference tree has no {entry}"
    assert not any(mark in harness for mark in design_marks), f"the {harness_name} harness carries the reference's design"
    assert entry not in generated_tree(), f"course sync copies the reference's {entry} into chapters/"


def test_a_design_that_reads_the_scored_workload_is_refused(monkeypatch, tmp_path):
    """A challenge.py that imports the harness (where the seeded trace is made) is refused before it runs, with
    the rule; a base class the page names (chapter 11's LRU) may be imported."""
    future = "from miniyaie.challenges.ch03_radix_eviction import chat_trace\n"
    assert "chat_trace" in base.reads_the_workload(future)
    assert base.reads_the_workload("import miniyaie.challenges.ch03_radix_eviction as h\n")
    assert base.reads_the_workload("from miniyaie import challenges\n")
    assert base.reads_the_workload("import importlib\nh = importlib.import_module('miniyaie.challenges.ch03_radix_eviction')\n")
    assert base.reads_the_workload("from miniyaie.challenges.ch11_adapter_residency import LRU\n", ("LRU",)) is None
    assert base.reads_the_workload("from miniyaie.radix import RadixCache\n") is None
    design = tmp_path / "challenge.py"
    design.write_text(future + "def make_cache(*args):\n    return None\n")

    class Spec:
        origin = str(design)

    monkeypatch.setattr(base.importlib.util, "find_spec", lambda name: Spec())
    with pytest.raises(ValueError, match="may not read the workload it is scored on"):
        base.learner_design(3, "make_cache", None)


def test_the_command_refuses_an_unknown_chapter_or_impl(capsys):
    assert main(["challenge", "42"]) == 2
    assert "no challenge" in capsys.readouterr().err
    assert main(["challenge", "1", "--impl", "nowhere"]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_chapter_2s_admission_order_hook_is_what_the_page_says(monkeypatch):
    """The page: make_scheduler may return a Scheduler subclass whose _admission_order decides the order admission
    tries the waiting requests in; the score then follows that order (short requests first here)."""
    from miniyaie.challenges import ch02_paged_pool as ch02
    from miniyaie.scheduler import Scheduler, SchedulerConfig

    tried: list[int] = []

    class ShortFirst(Scheduler):
        def _admission_order(self):
            order = sorted(super()._admission_order(), key=lambda r: len(r.prompt_token_ids) + r.max_tokens)
            tried.append(len(order))
            return order

    config = SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=64, decode_reserve=0.2)
    short_first = ch02.serve_seconds(ch02.plain_memory, lambda memory: ShortFirst(config, memory))
    assert tried, "the scheduler never called _admission_order: the hook the page documents does not exist"
    plain_order = ch02.serve_seconds(ch02.plain_memory, lambda memory: Scheduler(config, memory))
    assert math.isfinite(short_first) and short_first != plain_order, "the order _admission_order returns changed nothing"


def test_chapter_11s_policy_hooks_are_what_the_page_says():
    """The page: make_policy(num_slots, ranks) returns an object whose next_read picks the adapter read next, victim
    the idle one replaced and prefetch one to read ahead; each is called, and the score follows them."""
    from miniyaie.challenges import ch11_adapter_residency as ch11

    calls: dict[str, int] = {"next_read": 0, "victim": 0, "prefetch": 0}

    class Contrary(ch11.LRU):  # the last asked read first, the most recently run evicted, the lowest name read ahead
        def next_read(self, waiting, now_ms):
            calls["next_read"] += 1
            return list(waiting)[-1]

        def victim(self, idle, now_ms):
            calls["victim"] += 1
            return max(idle, key=lambda name: self.last_step.get(name, -1.0))

        def prefetch(self, resident, now_ms):
            calls["prefetch"] += 1
            return min(set(ch11.adapter_ranks()) - set(resident))

    score = ch11.mean_wait_ms(Contrary)
    assert all(calls.values()), f"a hook the page documents was never called: {calls}"
    assert math.isfinite(score) and score != ch11.mean_wait_ms(ch11.LRU)


def test_chapter_11_refuses_a_victim_that_is_not_idle():
    from miniyaie.challenges import ch11_adapter_residency as ch11

    class Busy(ch11.LRU):
        def victim(self, idle, now_ms):
            return "not-an-adapter"

    with pytest.raises(ValueError, match="victim returned 'not-an-adapter', which is not one of the idle adapters"):
        ch11.mean_wait_ms(Busy)


def test_chapter_3_scores_only_verified_hits_and_always_checks_the_tree():
    """A cache whose match_prefix claims the whole prompt (padding its blocks with any others) scores what its real
    matches score, not 100; anything but a RadixCache is refused; a design that breaks the counters scores nothing;
    the reference's entry is not in the harness module, nor copied into the learner's tree."""
    from miniyaie.challenges import ch03_radix_eviction as ch03
    from miniyaie.course.sync import generated_tree
    from miniyaie.radix import RadixCache
    from miniyaie.radix.tree import PrefixMatch

    class ClaimsEverything(RadixCache):
        def match_prefix(self, tokens, touch=True):
            real = super().match_prefix(tokens, touch)
            n = len(tokens) // self.block_size
            padding = [b for b in range(self.allocator.num_blocks) if b not in real.blocks][: n - len(real.blocks)]
            return PrefixMatch(n * self.block_size, real.blocks + padding, real.node)

    class LosesCount(RadixCache):
        def evict(self, num_blocks):
            freed = super().evict(num_blocks)
            self.evictable_blocks += 1
            return freed

    baseline = ch03.hit_rate(ch03.lru_cache)
    claimed = ch03.hit_rate(ClaimsEverything)
    assert claimed == baseline, f"a match_prefix that claims the whole prompt scored {claimed} (its real matches: {baseline})"
    with pytest.raises(TypeError, match="RadixCache"):
        ch03.hit_rate(lambda allocator, block_size: object())
    with pytest.raises(AssertionError, match="evictable_blocks"):
        ch03.hit_rate(LosesCount)
    note = ch03.CHALLENGE.explain(65.0)  # the reference tree has a make_cache: the line compares it with plain LRU
    assert f"Plain LRU on your own tree (your RadixCache without make_cache): {baseline:.4g}" in note, note
    assert f"gains {65.0 - baseline:+.2f} points" in note, note
    harness = Path(ch03.__file__).read_text()
    assert "def evict" not in harness and "heapq" not in harness, "the harness module carries an eviction policy"
    assert "radix/challenge.py" not in generated_tree(), "course sync copies the reference's challenge entry into chapters/"
