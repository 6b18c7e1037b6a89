"""A chapter's graded tests on the reference, measured once and shared by `course holes` and `course mutants`.

`course mutants` needs every graded test's outcome and time on the reference
(bundled model aside): a reference that fails its own test would make every
mutant look killed, and each test's time sets its limit and its place in the
order. `course holes` has just run those same tests in the same kind of
session (the batch workers, side by side, one torch thread each): in its book
order check (c) every test marked with a task passes with the tasks up to it
filled in and the later ones stubbed (a test that passes so never reached a
stub: it ran the reference's code).
It runs the chapter's other graded tests (end-to-end ones) on the reference
too, and when every one passed or was skipped it records them all here, so
that `course mutants` run next (as in CI) skips a second run of the whole
chapter.

A record holds only for the exact code and tests it was measured on: its
key hashes every file of the reference package and the tests, the Python,
the versions of the packages that run the tests and the number of workers.
Holes takes the key before it runs anything (an edit during its run makes a
record no later run can find). Any change, and `course mutants` runs the
chapter itself. The records live
in .course-cache/ at the repository's root (not tracked).
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata

from miniyaie._switch import REPO_ROOT, SOLUTIONS_ROOT
from miniyaie.course.testrun import TestResult

CACHE_DIR = REPO_ROOT / ".course-cache"
_PACKAGES = ("torch", "triton", "transformers", "hypothesis", "pytest", "pytest-timeout")


def content_key(workers: int) -> str:
    """A hash of everything a chapter's tests on the reference depend on (see above)."""
    digest = hashlib.sha256()
    digest.update(f"{sys.executable}\n{sys.version}\nworkers {workers}\n".encode())
    for name in _PACKAGES:
        try:
            digest.update(f"{name} {metadata.version(name)}\n".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name} -\n".encode())
    files = [REPO_ROOT / "pyproject.toml"]
    for root in (SOLUTIONS_ROOT, REPO_ROOT / "tests"):
        files += [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    for path in sorted(files):
        digest.update(f"{path.relative_to(REPO_ROOT)}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _path(number: int, key: str):
    return CACHE_DIR / f"ch{number:02d}-{key[:32]}.json"


def save(number: int, key: str, results: list[TestResult]) -> None:
    """Record chapter `number`'s graded tests on the reference (all passed or skipped) under `key`."""
    CACHE_DIR.mkdir(exist_ok=True)
    rows = [[r.nodeid, r.tasks, r.end_to_end, r.outcome, r.duration] for r in results]
    path = _path(number, key)
    path.with_suffix(".tmp").write_text(json.dumps(rows))
    path.with_suffix(".tmp").replace(path)


def load(number: int, key: str) -> list[TestResult] | None:
    """The record `save` made under `key`, or None."""
    path = _path(number, key)
    if not path.exists():
        return None
    return [TestResult(nodeid, number, tasks, e2e, True, outcome, "", duration)
            for nodeid, tasks, e2e, outcome, duration in json.loads(path.read_text())]
