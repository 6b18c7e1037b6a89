"""Run many pytest sessions, each on its own tree, in one long-lived worker process.

`course holes` and `course mutants` run the same tests against dozens of
trees that differ in one region or one line. Starting a fresh pytest process
for each costs seconds (torch, transformers, hypothesis imports); the worker
pays that once. Each session still sees only its own tree: before it, every
chapter module (`miniyaie.<package>`) and every test module is dropped from
`sys.modules`, so chapter code and tests are imported afresh from the tree
that session selects. A worker that dies (a segfault in a mutant) is restarted
for the sessions after the one it died in, which is reported as "crashed".
Because the worker isolates every session this way, chapter 4's tests run in
it directly instead of one child process per test module (their conftest.py).

The sessions are shared out between WORKERS workers that run side by side
(the CI machines have 2 cores and a session is mostly single-threaded
Python), each with one torch thread, whether it runs alone or not, so that a
test's time (which `course mutants` turns into a time limit) is measured the
same way in every run. $MINIYAIE_COURSE_WORKERS sets another number (a
machine with more cores trying every mutant).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from miniyaie._switch import ENV_VAR, REPO_ROOT, _is_chapter_module
from miniyaie.course.pytest_plugin import RESULTS_ENV, TIMEOUTS_ENV
from miniyaie.course.testrun import TestResult

# Outcomes only. Without the warnings plugin an unraisable exception can only warn, never fail a
# test, so pytest's unraisableexception plugin has nothing to report here; it would still run a
# full gc.collect() at the end of every session (0.3-0.4 s in a worker holding torch, on each of
# hundreds of sessions).
QUIET = ["-q", "--no-header", "-p", "no:warnings", "-p", "no:unraisableexception", "--tb=no"]
CRASHED = "crashed"  # the outcome given to every test of a session whose worker died
WORKERS_ENV = "MINIYAIE_COURSE_WORKERS"  # more workers on a machine with more cores (`--all` runs)
WORKERS = int(os.environ.get(WORKERS_ENV) or min(2, os.cpu_count() or 1))  # sessions run side by side
KERNEL_TESTS_IN_PROCESS = "MINIYAIE_KERNEL_TESTS_IN_PROCESS"  # read by tests/ch04_triton_kernels/conftest.py


@dataclass(frozen=True)
class Session:
    """One pytest run: the implementation to select and pytest's arguments (paths or node ids)."""

    impl: str
    args: list[str]
    timeouts: dict[str, float] | None = None  # per-test time limits by node id (else pyproject's)


def run_sessions(sessions: list[Session], workers: int = WORKERS) -> list[list[TestResult]]:
    """Results of each session, in order; a session whose worker died has one CRASHED result."""
    workers = max(1, min(workers, len(sessions)))
    shares = [sessions[i::workers] for i in range(workers)]  # every workers-th session: alike in cost
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(_run_in_order, shares))
    results: list[list[TestResult]] = [[] for _ in sessions]
    for i, share in enumerate(done):
        results[i::workers] = share
    return results


def _run_in_order(sessions: list[Session]) -> list[list[TestResult]]:
    """Run `sessions` one after another in a worker, starting a new one after a worker died."""
    results: list[list[TestResult]] = []
    while len(results) < len(sessions):
        done = _run_worker(sessions[len(results) :])
        results += done
        if len(results) < len(sessions):  # the worker died inside the next session
            results.append([TestResult("<worker died>", None, [], False, True, CRASHED, "the test process died")])
    return results


def _run_worker(sessions: list[Session]) -> list[list[TestResult]]:
    with tempfile.TemporaryDirectory() as tmp:
        jobs, out = Path(tmp) / "sessions.json", Path(tmp) / "results.jsonl"
        jobs.write_text(json.dumps([{"impl": s.impl, "args": s.args, "timeouts": s.timeouts} for s in sessions]))
        out.touch()
        subprocess.run(
            [sys.executable, "-m", "miniyaie.course.batch", str(jobs), str(out)],
            cwd=REPO_ROOT,
            env={**os.environ, KERNEL_TESTS_IN_PROCESS: "1", "OMP_NUM_THREADS": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        lines = [line for line in out.read_text().splitlines() if line.strip()]
    return [[_result(nodeid, r) for nodeid, r in json.loads(line).items()] for line in lines]


def _result(nodeid: str, r: dict) -> TestResult:
    return TestResult(
        nodeid, r["chapter"], r["tasks"], r["end_to_end"], r["graded"], r["outcome"], r["message"], r["duration"]
    )


# ---------------------------------------------------------------- the worker


def _forget_imported_code() -> None:
    """Drop chapter modules and test modules so the next session imports them from its own tree."""
    tests = str(REPO_ROOT / "tests")
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if _is_chapter_module(name) or path.startswith(tests) or name == "conftest":
            del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
                delattr(sys.modules[parent], child)  # or `from parent import child` finds the old one


def _run_one(session: Session, report: Path) -> dict:
    import pytest

    _forget_imported_code()
    os.environ[ENV_VAR] = session.impl
    os.environ[RESULTS_ENV] = str(report)
    report.unlink(missing_ok=True)
    limits = report.with_suffix(".timeouts.json")
    limits.write_text(json.dumps(session.timeouts or {}))
    os.environ[TIMEOUTS_ENV] = str(limits)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        pytest.main([*session.args, "--impl", session.impl, *QUIET])
    if not report.exists():
        return {}
    return json.loads(report.read_text())


def _worker(jobs_path: str, out_path: str) -> None:
    sys.dont_write_bytecode = True  # a tree's .pyc must never stand in for another tree's source
    os.environ.setdefault("HYPOTHESIS_PROFILE", "mutants")  # pass or fail is all we read: no shrinking
    sessions = [Session(**j) for j in json.loads(Path(jobs_path).read_text())]
    report = Path(out_path).with_suffix(".report.json")
    with open(out_path, "a") as out:
        for session in sessions:
            out.write(json.dumps(_run_one(session, report)) + "\n")
            out.flush()


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
