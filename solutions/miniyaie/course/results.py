"""One test's outcome as the course tools read it, and how many test sessions they run side by side."""

from __future__ import annotations

import os
from dataclasses import dataclass

WORKERS_ENV = "MINIYAIE_COURSE_WORKERS"  # more workers on a machine with more cores (`--all` runs)
WORKERS = int(os.environ.get(WORKERS_ENV) or min(2, os.cpu_count() or 1))  # sessions run side by side


@dataclass
class TestResult:
    __test__ = False  # not a pytest test class

    nodeid: str
    chapter: int | None
    tasks: list[str]  # the tasks this test grades on its own
    end_to_end: bool  # needs every task of its chapter
    graded: bool
    outcome: str  # passed | failed | skipped | not run
    message: str
    duration: float = 0.0  # seconds the test itself ran, when it passed
    example: str = ""  # hypothesis's minimal failing example, when it found one
