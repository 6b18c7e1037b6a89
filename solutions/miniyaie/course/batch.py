"""Run many pytest sessions, each on its own tree, in one long-lived worker process.

`course holes` and `course mutants` run the same tests against dozens of
trees that differ in one region or one line. Starting a fresh pytest process
for each costs seconds (torch, transformers, hypothesis imports); the worker
pays that once. Each session still sees only its own tree: before it, every
chapter module (`miniyaie.<package>`) and every test module is dropped from
`sys.modules`, so chapter code and tests are imported afresh from the tree
that session selects. A worker that dies (a segfault in a mutant) is restarted
for the sessions after the one it died in, which is reported as "crashed";
a worker that holds more than memory_limit() bytes ends itself the same way
(code that allocates in a loop would otherwise fill the machine first).
A session in which a test ran past its time limit retires its worker once
the results are in: the looping code may have left a thread spinning (an
engine loop waiting while it holds its lock), and every later session in
that process would run beside it; a session that asks (`retire_after`: the chapter's whole folder on
the student stubs, whose failed tests may leave servers and threads behind) retires it too. A worker outlives one call of run_sessions: the next call (the next stage or
chapter of `course holes` / `course mutants`) sends its sessions to the same
processes, which isolate them the same way, so torch and the rest are imported
once per command, not once per call (1.5-3.5 s of CPU per worker each time).
Because the worker isolates every session this way, chapter 4's tests run in
it directly instead of in a child pytest (their conftest.py).

The sessions are shared out between WORKERS workers that run side by side
(the CI machines have 2 cores and a session is mostly single-threaded
Python), each with one torch thread, whether it runs alone or not, so that a
test's time (which `course mutants` turns into a time limit) is measured the
same way in every run. $MINIYAIE_COURSE_WORKERS sets another number (a
machine with more cores trying every mutant).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from miniyaie._switch import ENV_VAR, REPO_ROOT, _is_chapter_module
from miniyaie.course import pytest_plugin
from miniyaie.course.pytest_plugin import RESULTS_ENV, TIMEOUTS_ENV
from miniyaie.course.results import WORKERS, TestResult

# Outcomes only. Without the warnings plugin an unraisable exception can only warn, never fail a
# test, so pytest's unraisableexception plugin has nothing to report here; it would still run a
# full gc.collect() at the end of every session (0.3-0.4 s in a worker holding torch, on each of
# hundreds of sessions).
QUIET = ["-q", "--no-header", "-p", "no:warnings", "-p", "no:unraisableexception", "--tb=no"]
CRASHED = "crashed"  # the outcome given to every test of a session whose worker died
KERNEL_TESTS_IN_PROCESS = "MINIYAIE_KERNEL_TESTS_IN_PROCESS"  # read by tests/ch04_triton_kernels/conftest.py
MEMORY_EXIT = 86  # a worker's exit status when it ended itself for holding more than memory_limit() bytes
MEMORY_ENV = "MINIYAIE_WORKER_MEMORY_GIB"  # another limit (the course's own test of the guard)


def memory_limit() -> int:
    """The most memory one worker may hold: a quarter of the machine, at least 6 GiB (a test needs far less)."""
    if os.environ.get(MEMORY_ENV):
        return int(float(os.environ[MEMORY_ENV]) * (1 << 30))
    return max(6 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)


@dataclass(frozen=True)
class Session:
    """One pytest run: the implementation to select and pytest's arguments (paths or node ids)."""

    impl: str
    args: list[str]
    timeouts: dict[str, float] | None = None  # per-test time limits by node id (else pyproject's)
    retire_after: bool = False  # end the worker after it (a whole stub tree may leave threads and servers behind)


def run_sessions(sessions: list[Session], workers: int = WORKERS) -> list[list[TestResult]]:
    """Results of each session, in order; a session whose worker died has one CRASHED result.

    Each worker takes the next session in the list as soon as it is free (sessions differ in cost a
    hundredfold: a chapter's whole test folder, a task's three tests), so both stay busy to the end.
    """
    workers = max(1, min(workers, len(sessions)))
    queue = enumerate(sessions)
    lock = threading.Lock()

    def next_session() -> tuple[int, Session] | None:
        with lock:
            return next(queue, None)

    results: list[list[TestResult]] = [[] for _ in sessions]
    with ThreadPoolExecutor(workers) as pool:
        for done in pool.map(_run_in_order, range(workers), [next_session] * workers):
            for index, result in done:
                results[index] = result
    return results


class _Worker:
    """A worker process that runs the sessions sent to it one at a time, kept for later calls.

    Sessions go in on its stdin and results come back on its stdout, one JSON line each; the worker
    moves both off file descriptors 0 and 1 first, so a test's subprocess can neither read a session
    nor print into the results. An end of its stdout before a result means that it died.
    """

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "miniyaie.course.batch"],
            cwd=REPO_ROOT,
            env={**os.environ, KERNEL_TESTS_IN_PROCESS: "1", "OMP_NUM_THREADS": "1"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.retired = False  # it ended itself after a session with a hang: start a new one
        self.exit_status: int | None = None  # set when it died inside a session


    def run(self, session: Session) -> list[TestResult] | None:
        """The session's results; None when the worker died in it (it is then gone for good)."""
        try:
            self.proc.stdin.write(json.dumps(asdict(session)) + "\n")  # the worker makes Session(**it)
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except OSError:  # a broken pipe: it died before reading the session
            line = ""
        if not line:
            self.close()
            self.exit_status = self.proc.returncode
            return None
        answer = json.loads(line)
        if answer["retire"]:
            self.retired = True
            self.close()
        return [_result(nodeid, r) for nodeid, r in answer["results"].items()]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # the worker's loop ends at the end of its input
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


_POOL: dict[int, _Worker] = {}  # slot -> its live worker, reused by every call of run_sessions


def _run_in_order(slot: int, next_session) -> list[tuple[int, list[TestResult]]]:
    """Run the sessions next_session() hands out (index, session) in slot's worker until it hands out None,
    starting a new worker after one died."""
    results: list[tuple[int, list[TestResult]]] = []
    while (taken := next_session()) is not None:
        index, session = taken
        if slot not in _POOL:
            _POOL[slot] = _Worker()
        worker = _POOL[slot]
        done = worker.run(session)
        if done is not None and worker.retired:
            del _POOL[slot]
        if done is None:  # the worker died inside this session
            del _POOL[slot]
            why = "the test process died"
            if worker.exit_status == MEMORY_EXIT:
                why += f" holding more than {memory_limit() / (1 << 30):g} GiB of memory (a loop that keeps allocating?)"
            done = [TestResult("<worker died>", None, [], False, True, CRASHED, why)]
        results.append((index, done))
    return results


@atexit.register
def close_workers() -> None:
    """End the kept workers (at exit; a worker whose parent dies ends at the end of its input too)."""
    while _POOL:
        _POOL.popitem()[1].close()


def _result(nodeid: str, r: dict) -> TestResult:
    return TestResult(
        nodeid, r["chapter"], r["tasks"], r["end_to_end"], r["graded"], r["outcome"], r["message"], r["duration"]
    )


# ---------------------------------------------------------------- the worker


def _provided_module(name: str) -> bool:
    """A provided module (serving, backends, ...): it may hold names of the tree it was imported with (a chapter's
    exception class, say), so it is imported afresh too; the course's own modules and the switch stay."""
    parts = name.split(".")
    return len(parts) >= 2 and parts[0] == "miniyaie" and parts[1] not in ("course", "_switch")


def _forget_imported_code() -> None:
    """Drop chapter modules, the provided modules over them and test modules: the next session imports them from its own tree."""
    tests = str(REPO_ROOT / "tests")
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if _is_chapter_module(name) or _provided_module(name) or path.startswith(tests) or name == "conftest":
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


def _guard_memory(limit: int) -> None:
    """End this worker when it holds more than `limit` bytes. Code that allocates in a loop (an insert that
    never advances) grows by ~100 MB/s, and inside one long C call (a list copied whole) the time limit's
    signal waits for the call to return: two such workers filled a 24 GiB machine and swapped for minutes."""
    page = os.sysconf("SC_PAGE_SIZE")

    def watch() -> None:
        while True:
            with open("/proc/self/statm") as statm:
                if int(statm.read().split()[1]) * page > limit:
                    os._exit(MEMORY_EXIT)
            time.sleep(0.2)

    threading.Thread(target=watch, name="memory-guard", daemon=True).start()


def _worker() -> None:
    _guard_memory(memory_limit())
    sys.dont_write_bytecode = True  # a tree's .pyc must never stand in for another tree's source
    os.environ.setdefault("HYPOTHESIS_PROFILE", "mutants")  # pass or fail is all we read: no shrinking
    jobs, results = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # a test's subprocess reads nothing of the sessions
    os.dup2(null, 1)  # and prints nothing into the results
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        for line in jobs:
            session = Session(**json.loads(line))
            outcomes = _run_one(session, report)
            hung = pytest_plugin._HUNG or session.retire_after  # a test of this session ran past its limit, or asked
            results.write(json.dumps({"results": outcomes, "retire": hung}) + "\n")
            results.flush()
            if hung:  # a thread the looping code started may still spin: end without waiting for it
                os._exit(0)


if __name__ == "__main__":
    _worker()
