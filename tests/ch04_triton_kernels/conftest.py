"""Chapter 4: the tests run in a child Python process, restarted after a crash.

A Triton kernel that reads out of bounds can kill the whole process (the
interpreter segfaults on an unmasked load). So the pytest that collects these
tests does not run them: it starts one child pytest on the chapter's selected
tests, which records each test's result as it goes, and then reports the
child's results as its own. When the child dies, the first test without a
result is the one it died in: that test fails with the signal and the child's
last output, and a new child runs the tests after it. A child that ends any
other way (pytest could not collect, the backstop ran out) fails every test
left with its output: a new child would meet the same. One child, not one per
module, pays torch's and Triton's start-up once.

`course holes` runs its pytest sessions in worker processes that already
isolate them (course/batch.py: a worker that dies is restarted and its session
counts as crashed), so a worker sets KERNEL_TESTS_IN_PROCESS and these tests
run in it directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from _pytest.reports import TestReport

from miniyaie.course.batch import KERNEL_TESTS_IN_PROCESS

CHILD_RESULTS = "MINIYAIE_KERNEL_TEST_RESULTS"  # set in the child: where it appends its results
CHILD_TIMEOUT_S = 900  # a backstop for the whole module: each test in the child has its chapter's limit
CH00 = str(Path(__file__).resolve().parents[1] / "ch00_model")
if CH00 not in sys.path:
    sys.path.insert(0, CH00)

from kernel_cases import DEVICE  # noqa: E402 - the folder is on sys.path (pytest's rootdir-relative import)

if DEVICE != "cpu":  # on a GPU the same tests run the compiled kernels: their tensors are made there
    torch.set_default_device(DEVICE)

_in_child = CHILD_RESULTS in os.environ
_isolate = not _in_child and KERNEL_TESTS_IN_PROCESS not in os.environ  # the batch worker isolates
_chapter_run: dict[str, dict] = {}  # "results" and "crashes" of the child runs, once the first test asks


# ------------------------------------------------------------------ child side
if _in_child:

    def pytest_runtest_logreport(report):
        if report.when == "call" or report.failed or report.skipped:
            if report.skipped and isinstance(report.longrepr, tuple):
                text = report.longrepr[2]
            else:
                text = "" if report.passed else str(report.longrepr)
                crash = getattr(report.longrepr, "reprcrash", None)
                if crash is not None:  # the error line first: what `miniyaie grade` shows of a failure
                    text = f"{crash.message}\n{text}"
            with open(os.environ[CHILD_RESULTS], "a") as f:
                f.write(json.dumps({"nodeid": report.nodeid, "outcome": report.outcome, "text": text, "seconds": report.duration}) + "\n")


# ----------------------------------------------------------------- parent side
def _selected(session) -> list[str]:
    """This chapter's tests the session runs (all of them, or those `file::test` or -k chose), in order."""
    here = Path(__file__).parent
    return [item.nodeid for item in session.items if Path(item.path).parent == here]


def _crash_output(output: str) -> str:
    """What a dead child's output shows: faulthandler's dump from its start (innermost frame first, so the
    kernel line that faulted is in it), else the last 3,000 characters."""
    at = output.find("Fatal Python error")
    return output[at : at + 3000] if at >= 0 else output[-3000:]


def _last_error(proc) -> str:
    """The last line that names an error in a child's output (pytest's INTERNALERROR, a usage error)."""
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "Error" in line or "error:" in line]
    return f" ({lines[-1].strip()[:300]})" if lines else ""


def _run_child(config, tests: list[str]) -> dict:
    """One child pytest on `tests`: the results it recorded, and why it died (None when it did not)."""
    with tempfile.TemporaryDirectory() as tmp:
        results_file = Path(tmp) / "results.jsonl"
        env = {k: v for k, v in os.environ.items() if k != "MINIYAIE_RESULTS"}  # the parent writes that one
        env[CHILD_RESULTS] = str(results_file)
        args = [sys.executable, "-m", "pytest", "-q", *tests]
        if config.getoption("maxfail") == 1:
            args.append("-x")
        if config.getoption("timeout", None) is not None:  # `pytest --timeout=S` sets each test's limit in the child
            args.append(f"--timeout={config.getoption('timeout')}")
        killed = False  # by a signal
        try:
            proc = subprocess.run(args, cwd=config.rootpath, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
            killed = proc.returncode < 0
            crash = None if proc.returncode in (0, 1, 5) else f"exit status {proc.returncode}{_last_error(proc)}"
            if killed:
                crash = (f"killed by signal {-proc.returncode} (in Triton's interpreter that is what a tl.load or tl.store "
                         "outside its tensor does: mask every access that can pass the end of a row or tensor, and compute an offset "
                         "that can pass 2**31 in int64)")
            tail = _crash_output(proc.stdout + proc.stderr)
        except subprocess.TimeoutExpired as exc:
            crash, tail = f"timed out after {CHILD_TIMEOUT_S} s", str(exc.stdout or "")[-3000:]
        results = {}
        if results_file.exists():
            for line in results_file.read_text().splitlines():
                entry = json.loads(line)
                if entry["nodeid"] not in results or entry["outcome"] == "failed":
                    results[entry["nodeid"]] = (entry["outcome"], entry["text"], entry["seconds"])
        # Killed by a signal: a kernel took the process down in the test it ran. Any other end (pytest could not
        # collect, the whole run timed out) is no single test's doing, and a new child would meet it again.
        return {"results": results, "crash": crash, "tail": tail, "in_a_test": killed}


def _run_chapter(config, tests: list[str]) -> tuple[dict, dict]:
    """(results by node id, (why, output) by the node id of each test a child died in)."""
    results: dict[str, tuple] = {}
    crashes: dict[str, tuple[str, str]] = {}
    remaining = tests
    while remaining:
        run = _run_child(config, remaining)
        results.update(run["results"])
        missing = [t for t in remaining if t not in results]
        if run["crash"] is None or not missing:
            break
        if not run["in_a_test"]:  # nothing a restart would get past: every test left gets the reason
            crashes.update({test: (run["crash"], run["tail"]) for test in missing})
            break
        crashes[missing[0]] = (run["crash"], run["tail"])  # tests run in order: it died in the first one missing
        if config.getoption("maxfail") == 1:
            break
        remaining = missing[1:]
    return results, crashes


if _isolate:

    def pytest_collection_modifyitems(config, items):
        """No time limit here: the child enforces each test's own limit (it also runs the course plugin)."""
        for item in items:
            if Path(item.path).parent == Path(__file__).parent:
                item.add_marker(pytest.mark.timeout(0))  # the first test runs the whole chapter

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(item, nextitem):
        path = Path(item.path)
        if path.parent != Path(__file__).parent:
            return None
        if not _chapter_run:
            _chapter_run["results"], _chapter_run["crashes"] = _run_chapter(item.config, _selected(item.session))
        outcome, text, seconds = _chapter_run["results"].get(item.nodeid, (None, "", 0.0))
        if outcome is None:
            why, tail = _chapter_run["crashes"].get(item.nodeid, ("", ""))
            why = why or "the child stopped before this test (an earlier failure with -x, or a crash in an earlier test)"
            outcome, text = "failed", f"no result from the child process for this test: {why}\n{tail}"
        longrepr = None
        if outcome == "failed":
            longrepr = f"{text}\n[ran in a child process]"
        elif outcome == "skipped":
            longrepr = (str(path), item.location[1] or 0, text)
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for when, out, rep in (("setup", "passed", None), ("call", outcome, longrepr), ("teardown", "passed", None)):
            duration = seconds if when == "call" else 0.0
            report = TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, out, rep, when, duration=duration)
            ihook.pytest_runtest_logreport(report=report)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True
