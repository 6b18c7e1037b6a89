"""Running the `miniyaie` command in a subprocess."""

import os
import subprocess
import sys


def miniyaie(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    # The child inherits MINIYAIE_IMPL, so it runs the implementation under test.
    return subprocess.run(
        [sys.executable, "-m", "miniyaie", *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy()
    )


def assert_clear_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("miniyaie: error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0]


