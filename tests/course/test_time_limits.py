"""Every chapter's tests have a time limit of a minute or two, and a test past it names its task (not graded).

The limits come from one table (CHAPTER_LIMITS_S in course/pytest_plugin.py).
To stay cheap, these runs scale the table down with $MINIYAIE_TIME_LIMIT_SCALE
instead of waiting a whole minute; the message shows which limit applied.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from miniyaie.course.pytest_plugin import CHAPTER_LIMITS_S, LIMIT_SCALE_ENV
from miniyaie.course.registry import CHAPTERS, chapter
from miniyaie.course.testrun import run_tests

pytestmark = pytest.mark.ungraded
SCALE = 0.05


def planted(tmp_path: Path, number: int, file: str, old: str, new: str) -> Path:
    """A copy of chapter `number`'s reference package with `old` replaced by `new` in `file`."""
    ch = chapter(number)
    root = tmp_path / "miniyaie"
    shutil.copytree(ch.solution_dir, root / ch.package, ignore=shutil.ignore_patterns("__pycache__"))
    target = root / ch.package / file
    text = target.read_text()
    assert text.count(old) == 1, f"{file} changed: plant the loop elsewhere"
    target.write_text(text.replace(old, new))
    return root


def run_scaled(test: str, impl: str, monkeypatch):
    monkeypatch.setenv(LIMIT_SCALE_ENV, str(SCALE))
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    (result,) = [r for r in run_tests([test], impl) if r.nodeid == test]
    return result


def test_every_chapter_has_a_limit_between_twenty_seconds_and_two_minutes():
    assert set(CHAPTER_LIMITS_S) == {ch.number for ch in CHAPTERS}
    assert all(20 <= limit <= 120 for limit in CHAPTER_LIMITS_S.values()), CHAPTER_LIMITS_S


def test_a_tree_walk_that_never_advances_fails_at_the_chapter_limit_naming_its_task(tmp_path, monkeypatch):
    """Task 3.3's lock walk, planted so that it never moves up the tree: no --timeout given, the table decides."""
    root = planted(tmp_path, 3, "tree.py", "            node.lock_ref += 1\n            node = node.parent\n",
                   "            node.lock_ref += 1\n")
    result = run_scaled("tests/ch03_radix_tree/test_tree.py::test_locked_paths_are_never_evicted", f"radix={root}",
                        monkeypatch)
    limit = CHAPTER_LIMITS_S[3] * SCALE
    assert result.outcome == "failed"
    assert "Task 3.3" in result.message and f"its {limit:g} s time limit" in result.message, result.message


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="a CPU run: the kernel runs in Triton's interpreter")
def test_a_kernel_search_that_never_ends_fails_in_its_child_process_naming_its_task(tmp_path, monkeypatch):
    """Task 4.3's top-k bisection, planted so that it never narrows; chapter 4 runs its tests in a child pytest."""
    root = planted(tmp_path, 4, "sampling.py", "                if count >= k:\n                    lo = mid\n",
                   "                if count >= k:\n                    lo = lo\n")
    result = run_scaled("tests/ch04_triton_kernels/test_sampling_kernel.py::test_filters_bound_the_choice",
                        f"kernels={root}", monkeypatch)
    limit = CHAPTER_LIMITS_S[4] * SCALE
    assert result.outcome == "failed"
    assert "Task 4.3" in result.message and f"its {limit:g} s time limit" in result.message, result.message


def test_a_limit_that_runs_out_while_pytest_reports_a_finished_test_is_no_internal_error(tmp_path):
    """The alarm may ring after the test's own code is done (a slow report, a busy machine): that test did not hang."""
    (tmp_path / "conftest.py").write_text(
        "import time\n\ndef pytest_runtest_logreport(report):\n    if report.when == 'call':\n        time.sleep(1.0)\n"
    )
    (tmp_path / "test_quick.py").write_text(
        "import pytest\n\n@pytest.mark.timeout(0.3)\ndef test_quick():\n    pass\n\n"
        "@pytest.mark.timeout(0.3)\ndef test_stuck():\n    while True:\n        pass\n"
    )
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "miniyaie.course.pytest_plugin", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert "INTERNALERROR>" not in out, out[-3000:]
    assert proc.returncode == 1 and "1 failed, 1 passed" in out, out[-3000:]
    assert "test_stuck ran past its 0.3 s time limit" in out, out[-3000:]
