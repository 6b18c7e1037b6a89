"""Run a set of course tests in a fresh pytest process and read back each outcome."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from miniyaie._switch import ENV_VAR, REPO_ROOT
from miniyaie.course.pytest_plugin import RESULTS_ENV
from miniyaie.course.results import TestResult  # noqa: F401 (the course tools import it from here too)


def run_tests(paths: list[str], impl: str, extra_args: list[str] = (), quiet: bool = True) -> list[TestResult]:
    """Run pytest on `paths` with the implementation `impl`; results in collection order."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "results.json")
        env = {**os.environ, ENV_VAR: impl, RESULTS_ENV: report}
        cmd = [sys.executable, "-m", "pytest", *paths, "--impl", impl, *extra_args]
        if quiet:
            cmd += ["-q", "--no-header", "-p", "no:warnings", "--tb=no"]
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=quiet, text=True)
        if not os.path.exists(report):
            output = (proc.stdout or "") + (proc.stderr or "") if quiet else ""
            raise RuntimeError(f"pytest did not run (exit {proc.returncode}):\n{output[-3000:]}")
        with open(report) as f:
            raw = json.load(f)
    results = []
    for nodeid, r in raw.items():
        outcome = r["outcome"]
        results.append(
            TestResult(nodeid, r["chapter"], r["tasks"], r["end_to_end"], r["graded"], outcome, r["message"], r["duration"],
                       r.get("example", ""))
        )
    return results
