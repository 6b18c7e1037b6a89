"""`miniyaie grade`'s table: one row per task, end-to-end tests apart (not graded itself)."""

import pytest

from miniyaie.course.grade import heading_id, task_table
from miniyaie.course.testrun import TestResult

pytestmark = pytest.mark.ungraded


def result(nodeid, tasks, outcome, end_to_end=False):
    return TestResult(f"tests/ch00_model/{nodeid}", 0, tasks, end_to_end, True, outcome, "")


def test_a_task_passes_when_its_own_tests_pass_even_if_end_to_end_fails():
    rows, all_pass = task_table(
        0,
        [
            result("test_layers.py::test_a", ["0.1"], "passed"),
            result("test_layers.py::test_b", ["0.1"], "passed"),
            result("test_layers.py::test_c", ["0.2"], "failed"),
            result("test_generate.py::test_e2e", [], "failed", end_to_end=True),
        ],
    )
    status = {row[0]: (row[2], row[3]) for row in rows}
    assert status["0.1"] == ("2/2", "pass")
    assert status["0.2"] == ("0/1", "FAIL")
    assert status["0.3"] == ("0/0", "no tests")
    assert status["all"] == ("0/1", "FAIL")
    assert not all_pass


def test_heading_ids_follow_mdbook():
    assert heading_id("Task 0.4: Causal attention over a KV cache") == "task-04-causal-attention-over-a-kv-cache"
