"""`miniyaie grade`'s table: one row per task, end-to-end tests apart (not graded itself)."""

import ast
from pathlib import Path

import pytest

from miniyaie.course.grade import heading_id, task_table
from miniyaie.course.testrun import TestResult

pytestmark = pytest.mark.ungraded
REPO = Path(__file__).resolve().parents[2]


def result(nodeid, tasks, outcome, end_to_end=False):
    return TestResult(f"tests/ch00_model/{nodeid}", 0, tasks, end_to_end, True, outcome, "")


def test_a_task_passes_when_its_own_tests_pass_even_if_end_to_end_fails():
    rows, all_pass = task_table(
        0,
        [
            result("test_layers.py::test_a", ["0.1"], "passed"),
            result("test_layers.py::test_b", ["0.1"], "passed"),
            result("test_layers.py::test_c", ["0.2"], "failed"),
            result("test_generate.py::test_e2e", [], "failed", end_to_end=True),
        ],
    )
    status = {row[0]: (row[2], row[3]) for row in rows}
    assert status["0.1"] == ("2/2", "pass")
    assert status["0.2"] == ("0/1", "FAIL")
    assert status["0.3"] == ("0/0", "no tests")
    assert status["all"] == ("0/1", "FAIL")
    assert not all_pass


def test_heading_ids_follow_mdbook():
    assert heading_id("Task 0.4: Attention over a growing cache") == "task-04-attention-over-a-growing-cache"


def test_an_unmarked_test_counts_as_end_to_end_and_the_summary_counts_the_books_tasks():
    rows, all_pass = task_table(
        0,
        [
            result("test_layers.py::test_a", ["0.1"], "failed"),
            result("test_layers.py::test_unmarked", [], "passed"),  # no mark at all: needs every task
        ],
    )
    status = {row[0]: row for row in rows}
    assert "other" not in status, "every graded test belongs to a task or to the end-to-end row"
    assert status["all"][2] == "1/1"
    assert status["0.1"][3] == "FAIL" and status["0.1"][5] == "miniyaie hint 0.1", "a failing task points at its hint"
    assert status["0.2"][5] == "miniyaie hint 0.2" and status["all"][5] == ""
    assert [row[0] for row in rows if row[0] != "all"] == ["0.1", "0.2", "0.3", "0.4", "0.5"], "one row per book task"


def _marked(decorators) -> bool:
    return any(".task(" in text or ".ungraded" in text for text in decorators)


def test_every_test_names_its_task_or_is_ungraded():
    """So that `miniyaie grade` can put every test in a task's row (a module-level task mark means end to end)."""
    unmarked = []
    for path in sorted(REPO.glob("tests/ch*/test_*.py")):
        tree = ast.parse(path.read_text())
        module_marked = any(
            isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
            and _marked([ast.unparse(node.value)])
            for node in tree.body
        )
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                if not module_marked and not _marked([ast.unparse(d) for d in node.decorator_list]):
                    unmarked.append(f"{path.relative_to(REPO)}::{node.name}")
    assert not unmarked, "mark these with @pytest.mark.task('N.M') (the last task they need) or ungraded:\n" + "\n".join(unmarked)


def test_grading_one_task_runs_exactly_the_tests_marked_with_it():
    """`miniyaie grade 3.2` (pytest --task 3.2): that task's own tests, nothing else, and one row."""
    from miniyaie.course.testrun import run_tests

    results = run_tests(["tests/ch03_radix_tree"], "solutions", ["-m", "not ungraded", "--task", "3.2"])
    assert results, "no test ran for Task 3.2"
    assert all(r.tasks and "3.2" in r.tasks for r in results), [r.nodeid for r in results if "3.2" not in r.tasks]
    rows, all_pass = task_table(3, results, only="3.2")
    assert [row[0] for row in rows] == ["3.2"] and all_pass
    marked = sorted(
        f"{path.relative_to(REPO).as_posix()}::{node.name}"
        for path in (REPO / "tests/ch03_radix_tree").glob("test_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and any(ast.unparse(d) == "pytest.mark.task('3.2')" for d in node.decorator_list)
    )
    assert sorted({r.nodeid.split("[")[0] for r in results}) == marked


def test_a_syntax_error_in_your_code_is_named_with_its_file_and_line(tmp_path):
    """A learner's file that does not parse: every test file importing it fails to load; grade says why, where."""
    import shutil
    import subprocess
    import sys

    tree = tmp_path / "miniyaie"
    shutil.copytree(REPO / "solutions" / "miniyaie" / "scheduler", tree / "scheduler")
    broken = tree / "scheduler" / "request.py"
    lines = broken.read_text().splitlines()
    at = len(lines) // 2
    lines.insert(at, "def broken(:")
    broken.write_text("\n".join(lines) + "\n")
    done = subprocess.run([sys.executable, "-m", "miniyaie", "grade", "1.1", "--impl", f"scheduler={tree}"],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "could not load" in out and "SyntaxError" in out, out[-2000:]
    assert f"request.py, line {at + 1}" in out, f"the file and line of the error: {out[-2000:]}"
    assert "no tests ran" in out


def test_grade_shows_hypothesis_whole_story_with_the_step_that_fails_last():
    """A state machine's shrunk story can be long, and the step that breaks the invariant is its last line:
    the plugin keeps the whole example and grade prints every line of it (no cut after a dozen lines)."""
    from types import SimpleNamespace

    from hypothesis import settings
    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

    from miniyaie.course.grade import failure_text
    from miniyaie.course.pytest_plugin import _failing_example

    class Counter(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.count = 0

        @rule()
        def add_one(self):
            self.count += 1

        @rule()
        def add_two(self):
            self.count += 2

        @invariant()
        def below_forty(self):
            assert self.count < 40, "the count reached 40"

    with pytest.raises(AssertionError) as info:
        run_state_machine_as_test(Counter, settings=settings(max_examples=500, stateful_step_count=60,
                                                             derandomize=True, database=None, deadline=None))
    report = SimpleNamespace(longrepr=SimpleNamespace(reprcrash=SimpleNamespace(message=info.exconly())))
    example = _failing_example(report)
    steps = [line for line in example.splitlines() if "state.add_" in line]
    assert len(steps) >= 20, f"the shrunk story should take 20 steps or more to reach 40:\n{example}"
    assert "state.teardown()" in example.splitlines(), f"the story's end is missing:\n{example}"
    shown = failure_text(TestResult("tests/ch02_paged_kv_cache/test_x.py::test_machine", 2, ["2.1"], False, True,
                                    "failed", "AssertionError: the count reached 40", example=example))
    for line in example.splitlines():
        assert f"      {line}" in shown.splitlines(), f"grade dropped the story's line {line!r}:\n{shown}"


def test_an_ungraded_test_that_fails_on_the_stubs_is_named_as_a_hole():
    """`course holes` (d): ungraded means provided code only, so such a test must pass on the student tree;
    one that fails there (or errors, or crashes its worker) depends on learner code and needs a task row."""
    from miniyaie.course.holes import learner_dependent

    def run(nodeid, outcome, graded=False, chapter=0):
        return TestResult(f"tests/ch0{chapter}_x/{nodeid}", chapter, [], False, graded, outcome, "")

    results = [run("test_a.py::test_provided", "passed"), run("test_a.py::test_on_a_gpu", "skipped"),
               run("test_a.py::test_needs_learner_code", "failed"), run("test_a.py::test_crashed", "crashed"),
               run("test_a.py::test_graded", "failed", graded=True), run("test_b.py::test_other", "failed", chapter=1)]
    assert [r.nodeid.split("::")[1] for r in learner_dependent(results, 0)] == ["test_needs_learner_code", "test_crashed"]


def test_a_long_failure_keeps_its_sentences_and_shortens_its_data():
    """grade's line per failure: a printed set of 300 tokens must not push the sentence after it out."""
    from miniyaie.course.pytest_plugin import MESSAGE_CHARS, shorten

    line = f"AssertionError: {set(range(300))} were allowed: the mask must refuse them (the pattern ends here)"
    short = shorten(line)
    assert len(short) <= MESSAGE_CHARS and short.endswith("were allowed: the mask must refuse them (the pattern ends here)")
    assert "(1390 characters)" in short, short
    assert shorten("x" * 500).endswith("...") and len(shorten("x" * 500)) == MESSAGE_CHARS
    assert shorten("a short line (with brackets)") == "a short line (with brackets)"
