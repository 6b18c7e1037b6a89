"""`miniyaie course holes N`: prove that chapter N's tests notice every missing piece.

(a) With the whole student tree selected for the chapter, every graded test
    of the chapter must fail.
(b) With only one solution region stubbed (the rest reference), at least one
    graded test must fail. The region's own task's tests run first, in a
    session that collects only their modules and stops at the first failure,
    so a region is usually settled by one test; only a region they all pass
    meets the rest of the chapter's graded tests (a second session).
(c) Book order: for each task k, with the regions of tasks up to k filled
    and every later one stubbed (what a learner has who works in book
    order), every test marked with task k must pass. The bundled model's
    tests are left out here, as `course mutants` leaves them out: tiny
    models run the same code, and the test suite runs them on the reference.

(d) Ungraded means provided code only: with the whole student tree selected,
    every ungraded test of the chapter must pass (or skip). One that fails
    there depends on a learner's code, so `miniyaie grade` must run it: it
    needs a task mark. (a) and (d) are one session over the whole test folder,
    tests marked bundled_model included: the graded ones among them already
    load the model in that session, and a provided-code test that needs it is
    as much a test of learner code as any other once it fails on the stubs.

When (c) has run every graded test `course mutants` runs (a chapter whose
tests all carry a task's mark) and all passed, their outcomes and times are
recorded for it (course/reference.py); a chapter with end-to-end tests is
measured by the whole suite's run instead, or by `course mutants` itself.

All sessions run in the batch workers (course/batch.py), each importing its
own tree afresh.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from miniyaie.course import reference
from miniyaie.course.batch import WORKERS, Session, run_sessions
from miniyaie.course.grade import _task_key, format_table
from miniyaie.course.regions import Region, find_regions, stub_regions
from miniyaie.course.registry import Chapter, chapter
from miniyaie.course.sync import regions_of
from miniyaie.course.testrun import TestResult

GRADED = ["-m", "not ungraded"]
MUTANTS_RUN = ["-m", "not ungraded and not bundled_model"]  # the tests `course mutants` runs


def _tree_with_stubs(ch: Chapter, stubbed: list[Region], tmp: Path) -> Path:
    """A copy of the chapter's reference package with the `stubbed` regions stubbed."""
    root = tmp / "miniyaie"
    shutil.copytree(ch.solution_dir, root / ch.package, ignore=shutil.ignore_patterns("__pycache__"))
    for path in sorted({r.path for r in stubbed}):
        target = root / path
        text = target.read_text()
        begins = {r.begin for r in stubbed if r.path == path}
        target.write_text(stub_regions(text, [r for r in find_regions(text, path) if r.begin in begins], ch.page_of))
    return root


def _caught_by(results: list[TestResult] | None) -> str | None:
    return next((r.nodeid for r in results or [] if r.outcome in ("failed", "crashed")), None)


def _record_reference(number: int, key: str, light: list[TestResult], runs: list[list[TestResult]]) -> None:
    """Record the graded tests `course mutants` runs (bundled model aside) when (c) ran every one and all passed."""
    seen: dict[str, TestResult] = {}
    for r in (r for results in runs for r in results):
        if r.nodeid not in seen or r.duration > seen[r.nodeid].duration:  # a test of two tasks: its slower run
            seen[r.nodeid] = r
    wanted = [seen.get(t.nodeid) for t in light if t.graded and t.chapter == number]
    if wanted and all(r is not None and r.outcome in ("passed", "skipped") for r in wanted):
        reference.save(number, key, wanted)


def learner_dependent(results: list[TestResult], number: int) -> list[TestResult]:
    """Chapter `number`'s ungraded tests that did not pass or skip on the student tree: each needs a task mark."""
    return [r for r in results if not r.graded and r.chapter == number and r.outcome not in ("passed", "skipped")]


def holes(number: int) -> int:
    started = time.perf_counter()
    ch = chapter(number)
    regions = regions_of(ch)
    if not regions:
        print(f"Chapter {number} has no solution regions yet.")
        return 0
    failures = 0
    key = reference.content_key(WORKERS)  # before anything runs: see course/reference.py
    tasks = sorted({r.task for r in regions}, key=_task_key)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        one_stub = [_tree_with_stubs(ch, [r], tmp / f"b{i}") for i, r in enumerate(regions)]
        book_order = [
            _tree_with_stubs(ch, [r for r in regions if _task_key(r.task) > _task_key(k)], tmp / f"c{k}")
            for k in tasks
        ]
        collected, light = run_sessions([Session("solutions", [ch.tests, *GRADED, "--collect-only"]),
                                         Session("solutions", [ch.tests, *MUTANTS_RUN, "--collect-only"])])
        graded = [r for r in collected if r.graded and r.chapter == number]
        own = [[t.nodeid for t in graded if r.task in t.tasks] for r in regions]
        others = [[t.nodeid for t in graded if r.task not in t.tasks] for r in regions]
        sessions = [Session(f"{ch.package}=chapters", [ch.tests], retire_after=True)]  # (a), (d): the whole folder
        sessions += [Session(f"{ch.package}={root}", [*tests, "-x"]) for tests, root in zip(own, one_stub) if tests]
        stubbed = len(sessions) - 1
        light_ids = {t.nodeid for t in light}
        sessions += [
            Session(f"{ch.package}={root}", [t.nodeid for t in graded if k in t.tasks and t.nodeid in light_ids])
            for k, root in zip(tasks, book_order)
        ]
        student, *rest = run_sessions(sessions)
        first = iter(rest[:stubbed])
        caught = [_caught_by(next(first)) if tests else None for tests in own]
        by_task = rest[stubbed : stubbed + len(tasks)]
        _record_reference(number, key, light, by_task)
        missed = [i for i, c in enumerate(caught) if c is None and others[i]]  # own tests all passed: the rest
        second = run_sessions([Session(f"{ch.package}={one_stub[i]}", [*others[i], "-x"]) for i in missed])
        for i, results in zip(missed, second):
            caught[i] = _caught_by(results)

    print(f"(a) chapter {number}: student tree ({ch.package}=chapters), every graded test must fail")
    results = [r for r in student if r.graded]
    survivors = [r for r in results if r.outcome != "failed"]
    if not results:
        print("    no graded tests found: hole")
        failures += 1
    for r in survivors:
        print(f"    HOLE: {r.nodeid} {r.outcome} against the stubs")
    failures += len(survivors)
    print(f"    {len(results) - len(survivors)}/{len(results)} graded tests fail as they should")

    print(f"(b) chapter {number}: each region stubbed alone must fail a test")
    rows = []
    for region, killer in zip(regions, caught):
        failures += killer is None
        rows.append([region.task, region.what, f"{region.path}:{region.begin}", killer or "HOLE: no test fails"])
    print(format_table(rows, ["task", "region", "file:line", "caught by"]))

    print(f"(c) chapter {number}: book order, tasks up to k done and later ones stubbed, task k's tests pass")
    rows = []
    for k, results in zip(tasks, by_task):
        bad = [r for r in results if r.outcome not in ("passed", "skipped")]
        if not results:
            bad_text = "no tests marked with this task"
        else:
            bad_text = "; ".join(f"{r.nodeid.split('::')[-1]}: {r.message or r.outcome}"[:160] for r in bad)
        failures += bool(bad) or not results
        rows.append([k, f"{len(results) - len(bad)}/{len(results)}", "ok" if results and not bad else bad_text])
    print(format_table(rows, ["task", "tests pass", "problem"]))

    print(f"(d) chapter {number}: student tree, every ungraded test (provided code only) must pass or skip")
    ungraded, dependent = [r for r in student if not r.graded and r.chapter == number], learner_dependent(student, number)
    for r in dependent:
        print(f"    HOLE: {r.nodeid} fails on the student stubs, so it depends on learner code: give it a task "
              f"row (@pytest.mark.task, the last task it needs) in place of ungraded ({r.message[:120]})")
    failures += len(dependent)
    print(f"    {len(ungraded) - len(dependent)}/{len(ungraded)} ungraded tests pass or skip as they should")
    elapsed = time.perf_counter() - started
    print(f"Chapter {number}: {'no holes' if failures == 0 else f'{failures} hole(s)'} ({elapsed:.0f} s).", flush=True)
    return 0 if failures == 0 else 1
