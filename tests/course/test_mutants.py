"""The course's planted-bug tooling: mutants, the batch worker, time limits (not graded itself)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from miniyaie.course.batch import Session, run_sessions
from miniyaie.course.grade import stub_hit, task_table
from miniyaie.course.mutants import chapter_mutants, load_equivalent, mutants_of
from miniyaie.course.regions import find_regions
from miniyaie.course.registry import CHAPTERS, chapter
from miniyaie.course.rotation import SLICES, commit_turn, in_turn, slices_of
from miniyaie.course.sync import regions_of
from miniyaie.course.testrun import TestResult, run_tests

pytestmark = pytest.mark.ungraded

SOURCE = """\
def f(xs, budget):
    # BEGIN SOLUTION 1.2: Example
    out = []
    while xs and budget > 0:
        out.append(min(xs[0], budget))
        budget -= 1
    # END SOLUTION
    return out
"""


def test_mutants_change_one_thing_inside_the_region_and_compile():
    (region,) = find_regions(SOURCE, "x.py")
    found = mutants_of(region, SOURCE)
    changes = {(m.original, m.mutated) for m in found}
    assert ("while xs and budget > 0:", "while xs and budget >= 0:") in changes  # boundary
    assert ("while xs and budget > 0:", "while xs or budget > 0:") in changes
    assert ("out.append(min(xs[0], budget))", "out.append(max(xs[0], budget))") in changes
    assert ("out.append(min(xs[0], budget))", "out.appendleft(min(xs[0], budget))") in changes
    assert ("budget -= 1", "budget += 1") in changes and ("budget -= 1", "budget -= 2") in changes
    assert ("budget -= 1", "pass") in changes  # a statement left out
    assert ("while xs and budget > 0:", "while not (xs and budget > 0):") in changes
    for m in found:
        assert m.text.splitlines()[0] == "def f(xs, budget):" and m.text.splitlines()[-1] == "    return out"
        compile(m.text, "x.py", "exec")
    assert len({m.text for m in found}) == len(found)


def test_every_listed_equivalent_mutant_is_still_a_mutant_of_the_reference():
    """A stale entry (the line changed) would silently excuse nothing; list only live ones."""
    live = set()
    for ch in CHAPTERS:
        for region in regions_of(ch):
            live |= {m.key for m in mutants_of(region, (ch.solution_dir.parent / region.path).read_text())}
    for key, reason in load_equivalent().items():
        assert key in live, f"no such mutant any more: {key}"
        assert len(reason) > 10, f"say why {key} cannot be told apart"


def test_grade_names_the_earlier_stub_a_failing_task_ran_into():
    message = "NotImplementedError: Chapter 1, Task 2: Admit waiting requests — see book/src/ch01_scheduler.md"
    assert stub_hit(message) == "1.2" and stub_hit("AssertionError: wrong") is None
    rows, _ = task_table(1, [TestResult("tests/ch01_scheduler/test_x.py::t", 1, ["1.3"], False, True, "failed", message)])
    status = {row[0]: row[3] for row in rows}
    assert "Task 1.2" in status["1.3"] and status["1.3"].startswith("FAIL")


def test_grade_blames_the_learners_code_not_a_later_stub_it_reached():
    """Task 1.3's tests pass with Task 1.4 stubbed (book order): reaching 1.4's stub means 1.3's code is wrong
    (a finished request left running), so the status must not send the learner to do 1.4 first."""
    message = "NotImplementedError: Chapter 1, Task 4: Serve running requests within the budget — see book/src/ch01_scheduler.md"
    rows, _ = task_table(1, [TestResult("tests/ch01_scheduler/test_x.py::t", 1, ["1.3"], False, True, "failed", message)])
    status = {row[0]: row[3] for row in rows}["1.3"]
    assert status.startswith("FAIL") and "do it first" not in status, status
    assert "Task 1.4's stub" in status and "your code up to Task 1.3" in status, status


def _scheduler_tree(tmp_path: Path, old: str, new: str) -> Path:
    root = tmp_path / "miniyaie"
    shutil.copytree(chapter(1).solution_dir, root / "scheduler", ignore=shutil.ignore_patterns("__pycache__"))
    target = root / "scheduler" / "scheduler.py"
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new, 1))
    return root


ADMISSION_LOOP = "        for request in order:\n", "        while True:\n            pass\n        for request in order:\n"


def test_an_infinite_loop_in_a_task_fails_with_a_message_naming_the_task(tmp_path):
    root = _scheduler_tree(tmp_path, *ADMISSION_LOOP)
    test = "tests/ch01_scheduler/test_scheduler.py::test_admission_starts_after_the_cached_prefix"
    (result,) = [r for r in run_tests([test], f"scheduler={root}", ["--timeout", "2"]) if r.nodeid == test]
    assert result.outcome == "failed"
    assert "Task 1.2" in result.message and "time limit" in result.message


def test_batch_sessions_each_import_their_own_tree(tmp_path):
    """One worker process, three trees: the reference, a broken one, the reference again."""
    broken = _scheduler_tree(tmp_path, "        self.waiting.appendleft(request)\n", "        self.waiting.append(request)\n")
    test = "tests/ch01_scheduler/test_simulation.py::test_random_workloads_keep_every_invariant"
    sessions = [Session("solutions", [test]), Session(f"scheduler={broken}", [test]), Session("solutions", [test])]
    outcomes = run_sessions(sessions, workers=1)
    assert [[r.outcome for r in results if r.nodeid == test] for results in outcomes] == [["passed"], ["failed"], ["passed"]]


def test_a_session_with_a_hang_retires_its_worker_and_the_next_session_runs_in_a_fresh_one(tmp_path):
    """A looping mutant may leave a thread spinning (an engine loop waiting while holding its lock):
    the sessions after it must not run beside that thread."""
    (tmp_path / "test_where.py").write_text(
        "import os, threading\n\ndef test_where():\n"
        "    names = [t.name for t in threading.enumerate()]\n"
        "    with open(os.path.join(os.path.dirname(__file__), 'where.txt'), 'a') as f:\n"
        "        f.write(f'{os.getpid()} {\"spinner\" in names}\\n')\n"
    )
    (tmp_path / "test_hang.py").write_text(
        "import threading, pytest\n\n@pytest.mark.timeout(0.5)\ndef test_hang():\n"
        "    threading.Thread(target=lambda: [None for _ in iter(int, 1)], name='spinner', daemon=True).start()\n"
        "    while True:\n        pass\n"
    )
    plugin = ["-p", "miniyaie.course.pytest_plugin", "-p", "no:cacheprovider"]
    where, hang = str(tmp_path / "test_where.py"), str(tmp_path / "test_hang.py")
    outcomes = run_sessions([Session("solutions", [*plugin, s]) for s in (where, hang, where)], workers=1)
    assert [[r.outcome for r in results] for results in outcomes] == [["passed"], ["failed"], ["passed"]]
    (first_pid, _), (second_pid, spinner_seen) = [line.split() for line in (tmp_path / "where.txt").read_text().splitlines()]
    assert first_pid != second_pid, "the session after a hang ran in the worker that hung"
    assert spinner_seen == "False"


def test_a_session_that_keeps_allocating_ends_its_worker_and_counts_as_crashed_naming_memory(tmp_path, monkeypatch):
    """A mutant that allocates in a loop (an insert that never advances) fills the machine in minutes when its
    time limit's signal waits on one long C call: the worker's memory guard ends it, and the next session runs."""
    from miniyaie.course import batch

    (tmp_path / "test_grow.py").write_text(
        "def test_grow():\n    held = bytearray()\n    while True:\n        held += bytes(50_000_000)\n")
    (tmp_path / "test_fine.py").write_text("def test_fine():\n    assert True\n")
    batch.close_workers()  # workers started before this test hold the usual limit
    monkeypatch.setenv(batch.MEMORY_ENV, "2")
    try:
        grow, fine = str(tmp_path / "test_grow.py"), str(tmp_path / "test_fine.py")
        outcomes = run_sessions([Session("solutions", ["-p", "no:cacheprovider", s]) for s in (grow, fine)], workers=1)
    finally:
        batch.close_workers()
    (died,), (fine_result,) = outcomes
    assert died.outcome == "crashed" and "more than 2 GiB of memory" in died.message, died
    assert fine_result.outcome == "passed"


SLOT_LOAD = "    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)\n"


def _kernels_tree(tmp_path: Path, name: str, old: str, new: str) -> Path:
    root = tmp_path / name / "miniyaie"
    shutil.copytree(chapter(4).solution_dir, root / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    target = root / "kernels" / "store_kv_kernel.py"
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new, 1))
    return root


def test_batch_workers_run_kernel_tests_in_process_contain_a_crash_and_keep_the_order(tmp_path):
    """Two workers share five sessions of a chapter 4 test (the Triton interpreter, in the worker itself):
    each session runs its own tree's kernel, a kernel that segfaults the worker counts as crashed and
    the sessions after it still run, and the results come back in the sessions' order."""
    wrong = _kernels_tree(tmp_path, "wrong", "    tl.store(v_cache_ptr + slot * stride_cs + cols, v.to",
                          "    tl.store(v_cache_ptr + slot * stride_cs + cols, k.to")
    segfault = _kernels_tree(tmp_path, "segfault", SLOT_LOAD, SLOT_LOAD.replace("token)", "token + (1 << 40))"))
    test = "tests/ch04_triton_kernels/test_store_kv.py::test_store_into_one_layer_of_a_pool_leaves_the_other_layers"
    impls = ["solutions", f"kernels={wrong}", f"kernels={segfault}", "solutions", f"kernels={wrong}"]
    outcomes = run_sessions([Session(impl, [test]) for impl in impls], workers=2)
    assert [{r.outcome for r in results if r.nodeid == test or r.outcome == "crashed"} for results in outcomes] == [
        {"passed"}, {"failed"}, {"crashed"}, {"passed"}, {"failed"}
    ]


def test_a_reference_record_holds_only_for_the_content_it_was_measured_on(tmp_path, monkeypatch):
    """`course holes` records the reference's results for `course mutants`; any change to the code or the
    tests (or another number of workers) gives another key, under which nothing is recorded."""
    from miniyaie.course import reference

    for folder in ("solutions/miniyaie/scheduler", "tests/ch01_scheduler"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "a.py").write_text("x = 1\n")
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.setattr(reference, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(reference, "SOLUTIONS_ROOT", tmp_path / "solutions" / "miniyaie")
    monkeypatch.setattr(reference, "CACHE_DIR", tmp_path / ".course-cache")
    measured = [TestResult("tests/ch01_scheduler/a.py::t", 1, ["1.2"], False, True, "passed", "", 0.25)]
    key = reference.content_key(2)
    assert reference.load(1, key) is None
    reference.save(1, key, measured)
    assert reference.load(1, reference.content_key(2)) == measured
    assert reference.load(2, key) is None and reference.content_key(1) != key
    for folder in ("solutions/miniyaie/scheduler", "tests/ch01_scheduler"):
        (tmp_path / folder / "a.py").write_text("x = 2\n")
        assert reference.content_key(2) != key, f"an edit in {folder} must change the key"
        key = reference.content_key(2)


def test_any_run_of_successive_turns_tries_every_mutant_once():
    """The CI slice changes with each commit; as many successive turns as there are slices try each mutant once."""
    number = 3
    every, slices = chapter_mutants(number), slices_of(number)
    assert 1 < slices <= max(SLICES.values()) and len(every) > slices
    for first in (0, 307):
        tried = [[m for m in every if in_turn(m.key, number, turn)] for turn in range(first, first + slices)]
        assert sorted(m.text for part in tried for m in part) == sorted(m.text for m in every)
        assert all(tried)  # no turn is empty
    chosen = chapter_mutants(number, turn=5)
    assert [m.text for m in chosen] == [m.text for m in every if in_turn(m.key, number, 5 + slices)]
    assert 0 < len(chosen) < len(every)


def test_any_run_of_successive_turns_checks_the_holes_of_every_chapter_once():
    from miniyaie.course.registry import CHAPTERS
    from miniyaie.course.rotation import HOLES_GROUPS, holes_in_turn

    chapters = [ch.number for ch in CHAPTERS]
    grouped = [number for group in HOLES_GROUPS for number in group]
    assert len(grouped) == len(set(grouped)), f"a chapter in two groups: {HOLES_GROUPS}"
    assert set(grouped) <= set(chapters), f"a group names a chapter that does not exist: {HOLES_GROUPS}"
    for first in (0, 651):
        turns = [holes_in_turn(chapters, turn) for turn in range(first, first + len(HOLES_GROUPS))]
        assert all(turns), "no turn checks nothing"
        ungrouped = set(chapters) - set(grouped)
        assert sorted(n for turn in turns for n in turn if n not in ungrouped) == sorted(grouped), turns
        assert all(ungrouped <= set(turn) for turn in turns), "a chapter in no group is checked at every turn"
    assert holes_in_turn([99, *HOLES_GROUPS[1]], 0) == [99], "a chapter no group names (a new one): every turn"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True)


def test_each_new_commit_takes_the_next_turn_and_a_tree_outside_git_turn_zero(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    turns = []
    for i in range(3):
        (repo / "f.txt").write_text(str(i))
        _git(repo, "add", "f.txt")
        _git(repo, "commit", "-q", "-m", str(i))
        turn, source = commit_turn(repo)
        turns.append(turn)
        assert f"number {turn}" in source
    assert turns == [turns[0], turns[0] + 1, turns[0] + 2]
    outside = tmp_path / "plain"
    outside.mkdir()
    assert commit_turn(outside)[0] == 0
