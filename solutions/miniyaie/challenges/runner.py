"""`miniyaie challenge N`: correctness first, then the workload in one child process per tree, then the table."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from miniyaie._switch import CHAPTER_PACKAGES, ENV_VAR, REPO_ROOT
from miniyaie.challenges.base import Challenge, challenge_for
from miniyaie.course.grade import format_table
from miniyaie.course.testrun import run_tests

_MARK = "CHALLENGE-SCORES "


def failing_tests(challenge: Challenge, impl: str) -> list[str]:
    """The correctness tests that do not pass on `impl` (node id and the first line of the reason)."""
    if not challenge.correctness_tests:
        return []
    os.environ.setdefault("HYPOTHESIS_PROFILE", "grading")
    results = run_tests(list(challenge.correctness_tests), impl, ["-m", "not ungraded", "--continue-on-collection-errors"])
    if not results:
        return [f"no test ran in {' '.join(challenge.correctness_tests)}"]
    return [f"{r.nodeid}: {(r.message or r.outcome).strip().splitlines()[0][:200] if (r.message or r.outcome).strip() else r.outcome}"
            for r in results if r.outcome == "failed"]


def score_in_child(number: int, role: str, impl: str, timeout: float = 600) -> dict[str, float | str | None]:
    """Run one column of the challenge in a fresh process that imports only the tree `impl` selects."""
    env = {**os.environ, ENV_VAR: impl}
    proc = subprocess.run([sys.executable, "-m", "miniyaie.challenges.child", str(number), role],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK):])
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
    raise RuntimeError(f"the {role} workload of chapter {number}'s challenge failed (exit {proc.returncode}) "
                       f"with {ENV_VAR}={impl}:\n" + "\n".join(tail))


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def score_table(challenge: Challenge, scores: dict[str, float | None], impl: str) -> str:
    rows = []
    if "baseline" in scores:
        label = challenge.extra.get("baseline_label", "a simple design (reference tree)")
        rows.append(["baseline", _fmt(scores["baseline"]), label])
    rows.append(["yours", _fmt(scores["yours"]), impl])
    rows.append(["reference", _fmt(scores["reference"]), "solutions"])
    header = [" ", f"{challenge.metric} ({challenge.unit}, {challenge.direction})", "code"]
    return format_table(rows, header)


def challenge(number: int, impl: str | None = None) -> int:
    """Print the challenge, refuse a score when the correctness tests fail, else print the table. Exit status."""
    ch = challenge_for(number)
    impl = impl or f"{CHAPTER_PACKAGES[number]}=chapters"
    print(f"Chapter {number} challenge: {ch.title}\n  workload: {ch.workload}", flush=True)
    print(f"Checking correctness with {impl} ({len(ch.correctness_tests)} test paths) ...", flush=True)
    failed = failing_tests(ch, impl)
    if failed:
        print(f"No score: {len(failed)} correctness test{'s' * (len(failed) > 1)} failed with {impl}; "
              f"a score counts only when they pass (miniyaie grade {number} shows why):")
        for line in failed[:10]:
            print(f"  {line}")
        if len(failed) > 10:
            print(f"  ... and {len(failed) - 10} more")
        return 1
    scores = {**score_in_child(number, "yours", impl), **score_in_child(number, "reference", "solutions")}
    print(score_table(ch, scores, impl))
    if scores.get("yours_note"):
        print(scores["yours_note"])
    if ch.extra.get("ratio") and scores.get("yours") and scores.get("reference"):  # a timing: machines differ
        print(f"yours / reference: {scores['yours'] / scores['reference']:.2f}x, both measured in this run")
    if ch.note:
        print(ch.note)
    return 0
