"""`miniyaie course mutants N`: prove that chapter N's tests catch wrong code, not only missing code.

For each solution region, small planted bugs (course/mutate.py) are tried one
at a time: a copy of the chapter's reference package holds the one mutant,
and the chapter's graded tests run against it, the mutant's own task's tests
first, stopping at the first failure. A mutant no test fails "survives". A
survivor is either a gap in the tests or a change no correct observable
behaviour can tell apart (an equivalent mutant); the equivalent ones are
listed, each with its reason, in course/equivalent_mutants.txt. Any other
survivor fails the check. A mutant on that list is not run (it would survive
by definition, and each survivor costs a run of the whole chapter's tests).

Each commit tries one slice of the chapter's mutants, a different slice each
commit, so that successive commits try them all (course/rotation.py); `turn`
picks another slice, and `turn=None` (`--all`) tries every mutant.

The reference's own run (every test's outcome and time) is skipped when
`course holes` or the whole suite's pytest run has measured the same tests
on the same content (course/reference.py), as in CI.

Tests that load the bundled SmolLM2 (marked bundled_model) are left out:
each would cost minutes per mutant, and the tiny random models run the
same code. A test past its time limit counts as failed: the limit is generous (ten
times the test's own time on the reference, and at least 15 seconds, three
times the slowest set-up of a test module in the suite, 4.7 s to start a
server, which the limit also covers), so a mutant that trips it has made
the code loop (on a machine whose load jumps tenfold it could also be a
slow pass: a kill that is too lenient, never a false survivor).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from miniyaie._switch import REPO_ROOT
from miniyaie.course import reference as recorded
from miniyaie.course.batch import WORKERS, Session, run_sessions
from miniyaie.course.grade import _task_key, format_table
from miniyaie.course.mutate import Mutant, mutants_of
from miniyaie.course.registry import chapter
from miniyaie.course.rotation import in_turn, slices_of
from miniyaie.course.sync import regions_of
from miniyaie.course.testrun import TestResult

EQUIVALENT_FILE = Path(__file__).with_name("equivalent_mutants.txt")


def load_equivalent(path: Path = EQUIVALENT_FILE) -> dict[tuple[str, str, str, str], str]:
    """(file, line above, original line, mutated line) -> why no correct test can tell them apart.

    The file holds blocks of five lines: `@ file`, `~ the line above`,
    `- original`, `+ mutant`, `= reason` (a bare `~` when the line above is
    blank); lines starting with `#` and blank lines are ignored.
    """
    tags = ["@ ", "~ ", "- ", "+ ", "= "]
    entries, block = {}, []
    for raw in path.read_text().splitlines() if path.exists() else []:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == "~":
            line = "~ "  # the line above the change is blank
        block.append(line)
        if len(block) == len(tags):
            if [b[:2] for b in block] != tags:
                raise ValueError(f"{path.name}: expected lines starting {tags}, got {block}")
            entries[tuple(b[2:] for b in block[:4])] = block[4][2:]
            block = []
    if block:
        raise ValueError(f"{path.name}: an unfinished entry at the end: {block}")
    return entries


def chapter_mutants(number: int, turn: int | None = None) -> list[Mutant]:
    """Chapter `number`'s mutants in source order: all of them (turn None), or the slice tried at `turn`."""
    ch = chapter(number)
    found = [m for region in regions_of(ch) for m in mutants_of(region, (ch.solution_dir.parent / region.path).read_text())]
    return found if turn is None else [m for m in found if in_turn(m.key, number, turn)]


def _tree_with(mutant: Mutant, tmp: Path) -> Path:
    ch = chapter(mutant.region.chapter)
    root = tmp / "miniyaie"
    shutil.copytree(ch.solution_dir, root / ch.package, ignore=shutil.ignore_patterns("__pycache__"))
    (root / mutant.region.path).write_text(mutant.text)
    return root


def _ordered_tests(task: str, reference: list[TestResult]) -> tuple[list[str], list[str]]:
    """(the task's own tests, then the rest of the chapter and its end-to-end tests); quickest first in each.

    A mutant is first run against its own task's tests alone (most die there, and a session that
    collects a few test modules starts in a fraction of the time one that collects the whole
    chapter takes); only a survivor meets the rest.
    """
    quickest = sorted(reference, key=lambda r: r.duration)
    own = [r.nodeid for r in quickest if task in r.tasks]
    rest = [r.nodeid for r in quickest if task not in r.tasks and not r.end_to_end]
    end_to_end = [r.nodeid for r in quickest if task not in r.tasks and r.end_to_end]
    return own, rest + end_to_end


def _reference_run(tests: str) -> list[TestResult]:
    """The chapter's tests (bundled model aside) on the reference, its test modules shared out between the
    workers, so that each test's time is measured as the mutants' sessions will run: side by side."""
    modules = sorted(str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / tests).rglob("test_*.py"))
    shares = [modules[i::WORKERS] for i in range(WORKERS)]
    sessions = [Session("solutions", [*share, "-m", "not ungraded and not bundled_model"]) for share in shares if share]
    return [r for results in run_sessions(sessions) for r in results]


def _killer(results: list[TestResult] | None) -> str | None:
    """The test that killed a mutant in one session (None: it survived it, or the session did not run)."""
    if results is None:
        return None
    killer = next((r.nodeid for r in results if r.outcome in ("failed", "crashed")), None)
    if killer is None and not any(r.outcome == "passed" for r in results):
        killer = "(collection: the mutant breaks the import)"  # a SyntaxError, say: no test could run
    return killer


def _run_against(ch, trees: dict[Mutant, Path], tests: dict[Mutant, list[str]],
                 limits: dict[str, float]) -> dict[Mutant, list[TestResult]]:
    """One session per mutant that has tests here: its tree, those tests, stopping at the first failure."""
    chosen = [m for m in trees if tests.get(m)]
    sessions = [Session(f"{ch.package}={trees[m]}", [*tests[m], "-x"], limits) for m in chosen]
    return dict(zip(chosen, run_sessions(sessions))) if sessions else {}


def mutants(number: int, turn: int | None = None) -> int:
    """Try chapter `number`'s mutants of slice `turn` (every mutant when None); 1 if one survives unexplained."""
    started = time.perf_counter()
    ch = chapter(number)
    if not regions_of(ch):
        print(f"Chapter {number} has no solution regions yet.")
        return 0
    every, candidates = chapter_mutants(number), chapter_mutants(number, turn)
    equivalent = load_equivalent()
    to_run = [m for m in candidates if m.key not in equivalent]  # a listed one would survive by definition: not run
    if turn is None:
        which = f"all {len(every)} mutants"
    else:
        which = (f"slice {turn % slices_of(number) + 1} of {slices_of(number)} (turn {turn}): {len(candidates)} of "
                 f"{len(every)} mutants")
    print(f"Chapter {number} ({ch.title}): {which}, {len(candidates) - len(to_run)} of them listed as equivalent",
          flush=True)
    reference = recorded.load(number, recorded.content_key(WORKERS))  # from `course holes`, if the same content
    if reference is None:
        reference = [r for r in _reference_run(ch.tests) if r.graded and r.chapter == number]
    else:
        print(f"    the reference's {len(reference)} results: as `course holes` or the suite's run measured them on this same content", flush=True)
    broken = [r for r in reference if r.outcome not in ("passed", "skipped")]
    if broken or not reference:
        print(f"    the reference fails its own tests: {[r.nodeid for r in broken] or 'no graded tests'}")
        return 1
    reference = [r for r in reference if r.outcome == "passed"]
    limits = {r.nodeid: max(15.0, round(10 * r.duration, 1)) for r in reference}

    with tempfile.TemporaryDirectory() as tmp:
        trees = {m: _tree_with(m, Path(tmp) / str(i)) for i, m in enumerate(to_run)}
        own, rest = {}, {}
        for m in to_run:
            own[m], rest[m] = _ordered_tests(m.region.task, reference)
        first = _run_against(ch, trees, own, limits)
        killers = {m: _killer(results) for m, results in first.items()}
        survivors = {m: trees[m] for m in to_run if killers.get(m) is None}
        killers |= {m: _killer(results) for m, results in _run_against(ch, survivors, rest, limits).items()}

    by_task: dict[str, list[tuple[Mutant, str | None]]] = defaultdict(list)
    for mutant in candidates:
        by_task[mutant.region.task].append((mutant, killers.get(mutant)))

    rows, unexplained, explained = [], [], []
    for task in sorted(by_task, key=_task_key):
        tried = by_task[task]
        survived = [m for m, killer in tried if killer is None]
        listed = [m for m in survived if m.key in equivalent]
        killed = len(tried) - len(survived)
        score = f"{killed / (len(tried) - len(listed)):.0%}" if len(tried) > len(listed) else "-"
        rows.append([task, tried[0][0].region.what, len(tried), killed, len(listed), len(survived) - len(listed), score])
        explained += listed
        unexplained += [m for m in survived if m.key not in equivalent]
    print(format_table(rows, ["task", "region", "mutants", "killed", "equivalent", "survived", "score"]))
    for m in explained:
        print(f"    equivalent  {m.region.path}:{m.line}  {m.original}  ->  {m.mutated}  ({equivalent[m.key]})")
    for m in unexplained:
        print(f"    SURVIVED    Task {m.region.task} {m.region.path}:{m.line}  {m.original}  ->  {m.mutated}")
    if unexplained:
        print(f"    (a test should catch each; if none can, add it to {EQUIVALENT_FILE.name} as:)")
        for m in unexplained:
            print(f"    @ {m.region.path}\n    ~ {m.context}\n    - {m.original}\n    + {m.mutated}\n    = <why>")
    elapsed = time.perf_counter() - started
    verdict = "every mutant killed or explained" if not unexplained else f"{len(unexplained)} unexplained survivor(s)"
    print(f"Chapter {number}: {verdict} ({elapsed:.0f} s).", flush=True)
    return 1 if unexplained else 0
