"""`miniyaie grade N` / `miniyaie grade N.M`: run chapter N's (or one task's) tests on your code, show each task's status."""

from __future__ import annotations

import os
import re

from miniyaie._switch import CHAPTER_PACKAGES
from miniyaie.course.pytest_plugin import LOAD_ERROR
from miniyaie.course.registry import chapter
from miniyaie.course.sync import regions_of
from miniyaie.course.testrun import TestResult, run_tests


END_TO_END = "all"
_STUB = re.compile(r"NotImplementedError: Chapter (\d+), Task (\d+):")  # the message of a region's stub


def stub_hit(message: str) -> str | None:
    """The task whose unfilled stub a failing test ran into ("1.3"), if that is why it failed."""
    m = _STUB.search(message)
    return f"{m[1]}.{m[2]}" if m else None


def heading_id(text: str) -> str:
    """The id mdBook gives a heading: lower case, spaces to '-', other punctuation dropped."""
    return "".join(c if c.isalnum() or c in "-_" else "-" if c.isspace() else "" for c in text.lower())


def task_table(number: int, results: list[TestResult], only: str | None = None) -> tuple[list[list[str]], bool]:
    """Rows of (task, what, tests passed, status, where to read, hint) and whether all pass.

    One row per task of the book (the tests marked with it), then one
    end-to-end row for the tests that need every task (module-level marks;
    a graded test with no mark at all counts there too, since nothing says
    which task it needs). `only` keeps one task's row.
    """
    ch = chapter(number)
    what = {r.task: r.what for r in regions_of(ch)}
    by_task: dict[str, list[TestResult]] = {task: [] for task in sorted(what, key=_task_key)}
    unloaded = load_errors(results)
    for result in results:
        if result.chapter == number and result.graded and result not in unloaded:
            for task in result.tasks or [END_TO_END]:
                by_task.setdefault(task, []).append(result)
    if not by_task.get(END_TO_END, True):
        del by_task[END_TO_END]
    if only is not None:
        by_task = {only: by_task.get(only, [])}
    rows, all_pass = [], True
    for task, tests in by_task.items():
        passed, total = count_tests(tests)
        ok = bool(tests) and passed == total
        if unloaded:  # some of this task's tests may be in a file that did not load
            ok = False
        all_pass &= ok
        status = "pass" if ok else ("no tests" if not tests else "FAIL")
        if unloaded:
            status = f"{'no tests ran' if not tests else status}: a test file could not load (below)"
        blockers = sorted({b for t in tests if t.outcome == "failed" and (b := stub_hit(t.message)) not in (None, task)},
                          key=_task_key)
        # Book order (course holes (c)): a task's tests pass with the later tasks stubbed, so a later stub is reached
        # only through a bug in the code up to this task, never because that later task is missing.
        earlier = [b for b in blockers if task == END_TO_END or _task_key(b) < _task_key(task)]
        later = [b for b in blockers if b not in earlier]
        if earlier:
            status += f" (ran into Task {', '.join(earlier)}'s stub: do it first)"
        if later:
            status += (f" (reached Task {', '.join(later)}'s stub, which these tests never need when your code up to "
                       f"Task {task} is right: the bug is in that code, not a missing task)")
        if not blockers and any(t.outcome == "failed" and "TaskTimeout" in t.message for t in tests):
            status += " (timed out: a loop that never ends?)"
        if task in what:
            label, read = what[task], f"{ch.page_of(task)}#{heading_id(f'Task {task}: {what[task]}')}"
            hint = f"miniyaie hint {task}"
        else:
            label, read, hint = "end to end: needs every task", ch.page, ""
        cases = f" ({len(tests)} cases)" if len(tests) != total else ""
        rows.append([task, label, f"{passed}/{total}{cases}", status, "" if ok else read, "" if ok else hint])
    return rows, all_pass


def load_errors(results: list[TestResult]) -> list[TestResult]:
    """The test files that could not be imported (their tests never ran), e.g. after a syntax error."""
    return [r for r in results if r.message.startswith(LOAD_ERROR)]


def failure_text(result: TestResult) -> str:
    """A failing test's lines under the table: its message, then hypothesis's whole minimal example.

    The example is never cut: in a state machine's story the step that breaks
    an invariant is the last one, so a shortened story would hide it.
    """
    return "\n".join([f"  {result.nodeid}: {result.message}", *(f"      {line}" for line in result.example.splitlines())])


def count_tests(results: list[TestResult]) -> tuple[int, int]:
    """(tests passed, tests) counting test functions as the book lists them: a parametrised test
    passes when every one of its cases does."""
    outcomes: dict[str, bool] = {}
    for r in results:
        name = r.nodeid.split("[")[0]
        outcomes[name] = outcomes.get(name, True) and r.outcome == "passed"
    return sum(outcomes.values()), len(outcomes)


def format_table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def grade(number: int, impl: str | None = None, verbose: bool = False, task: str | None = None) -> int:
    """Grade chapter `number`, or only its task `task` ("5.1": that task's own tests, quicker)."""
    ch = chapter(number)
    impl = impl or f"{CHAPTER_PACKAGES[number]}=chapters"
    what = f"Task {task}" if task else f"chapter {number}"
    print(f"Grading {what} ({ch.title}) with {impl} ...", flush=True)
    os.environ.setdefault("HYPOTHESIS_PROFILE", "grading")  # one minimal failing example per test (tests/conftest.py)
    only_task = ["--task", task] if task else []
    # A file that cannot load (a syntax error in your code) fails as itself; the other files' tests still run.
    results = run_tests([ch.tests], impl, ["-m", "not ungraded", "--continue-on-collection-errors", *only_task],
                        quiet=not verbose)
    rows, all_pass = task_table(number, results, only=task)
    print(format_table(rows, ["task", "what", "tests", "status", "read", "stuck?"]))
    unloaded = load_errors(results)
    for message in dict.fromkeys(r.message for r in unloaded):  # one line per cause, usually one
        files = [r.nodeid for r in unloaded if r.message == message]
        print(f"  {message[0].upper()}{message[1:]}: {len(files)} test file{'s' * (len(files) > 1)} ({', '.join(files[:3])}"
              f"{', ...' if len(files) > 3 else ''})")
    failing = [r for r in results if r.graded and r.outcome == "failed" and r not in unloaded]
    for r in failing[:10]:
        print(failure_text(r))
    if len(failing) > 10:
        print(f"  ... and {len(failing) - 10} more failing tests (pytest {ch.tests} --impl {impl} shows them all)")
    tasks = [row for row in rows if row[0] != END_TO_END]
    tasks_ok = sum(row[3] == "pass" for row in tasks)
    graded = [r for r in results if r.graded and r.chapter == number and r not in unloaded]
    tests_ok, num_tests = count_tests(graded)
    summary = f"Task {task}: {tasks_ok}/1 passes" if task else f"Chapter {number}: {tasks_ok}/{len(tasks)} tasks pass"
    end_to_end = [row for row in rows if row[0] == END_TO_END]
    if end_to_end:
        summary += f", end to end {end_to_end[0][2]}"
    verdict = ("on to the next task" if task else "all tasks pass") if all_pass else "keep going"
    print(f"{summary}; {tests_ok}/{num_tests} tests pass: {verdict}.")
    stuck = [row[0] for row in tasks if row[3] != "pass"]
    if stuck:
        print(f"Stuck on Task {stuck[0]}? `miniyaie hint {stuck[0]}` gives the idea; `--level 2` and `--level 3` say more.")
    return 0 if all_pass else 1


def _task_key(task: str) -> tuple[int, int]:
    major, minor = task.split(".")
    return int(major), int(minor)
