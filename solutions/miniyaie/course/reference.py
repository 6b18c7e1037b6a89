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

The whole test suite's run (`python -m pytest`, as CI runs it first) is a
measurement of the same tests on the same reference too: when it ran every
test (no path, -k or -m given) with the reference selected, each of its
processes (pytest-xdist's workers) records what it ran under the content key
taken when its session started, and a chapter without a record of `course
holes` takes its results from there, when that run covered every test
`course mutants` needs. So `course holes` never runs a test only to record it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib import metadata

from miniyaie._switch import REPO_ROOT, SOLUTIONS_ROOT
from miniyaie.course.results import WORKERS, TestResult

CACHE_DIR = REPO_ROOT / ".course-cache"
_PACKAGES = ("torch", "triton", "transformers", "hypothesis", "pytest", "pytest-timeout")


def content_key(workers: int) -> str:
    """A hash of everything a chapter's tests on the reference depend on (see above)."""
    digest = hashlib.sha256()
    digest.update(f"{sys.prefix}\n{sys.version}\nworkers {workers}\n".encode())  # python and python3 alike
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
    """The record `save` made under `key`; else the whole suite's run under `key` when it covered chapter
    `number`'s graded tests (bundled model aside); else None."""
    path = _path(number, key)
    if not path.exists():
        return _from_suite_run(number, key)
    return [TestResult(nodeid, number, tasks, e2e, True, outcome, "", duration)
            for nodeid, tasks, e2e, outcome, duration in json.loads(path.read_text())]


def suite_run_key(config) -> str | None:
    """The content key when this pytest run is the whole suite (pytest's testpaths, no -k, -m, --lf, --task or
    --deselect) on the reference, as CI runs it; None for any other run (nothing is recorded then)."""
    import pytest

    from miniyaie._switch import ENV_VAR, parse_impl

    option = config.option
    subset = option.keyword or option.markexpr or getattr(option, "lf", False) or getattr(option, "deselect", None)
    if config.args_source != pytest.Config.ArgsSource.TESTPATHS or subset or config.getoption("--task"):
        return None
    spec = config.getoption("--impl") or os.environ.get(ENV_VAR, "solutions")
    return content_key(WORKERS) if set(parse_impl(spec).values()) == {SOLUTIONS_ROOT} else None


def save_suite_run(key: str, results: dict[str, dict]) -> None:
    """Record what this pytest process ran of the whole suite (one file per xdist worker; `results`: the
    course plugin's entries, every collected test with its outcome, "not run" for another worker's)."""
    if not any(entry["outcome"] != "not run" for entry in results.values()):
        return  # xdist's controller runs no test itself
    CACHE_DIR.mkdir(exist_ok=True)
    for old in CACHE_DIR.glob("suite-*.json"):
        if not old.name.startswith(f"suite-{key[:32]}-"):
            old.unlink(missing_ok=True)  # another content's run: no key will find it again
    path = CACHE_DIR / f"suite-{key[:32]}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.json"
    path.with_suffix(".tmp").write_text(json.dumps(results))
    path.with_suffix(".tmp").replace(path)


def _from_suite_run(number: int, key: str) -> list[TestResult] | None:
    """Chapter `number`'s graded tests (bundled model aside) as the suite's run under `key` left them, or None
    when no such run exists or one of them did not run in it."""
    collected, ran = {}, {}
    for path in CACHE_DIR.glob(f"suite-{key[:32]}-*.json"):
        for nodeid, entry in json.loads(path.read_text()).items():
            collected[nodeid] = entry
            if entry["outcome"] != "not run":
                ran[nodeid] = entry
    wanted = [n for n, e in collected.items() if e["chapter"] == number and e["graded"] and not e.get("bundled")]
    if not wanted or any(n not in ran for n in wanted):
        return None
    return [TestResult(n, number, ran[n]["tasks"], ran[n]["end_to_end"], True, ran[n]["outcome"], "",
                       ran[n]["duration"]) for n in wanted]
