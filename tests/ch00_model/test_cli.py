"""The `miniyaie chat` command answers with our own forward pass."""

import pytest
from cli_helpers import miniyaie


# End to end: needs every task of the chapter.
pytestmark = [pytest.mark.task("0.1"), pytest.mark.task("0.2"), pytest.mark.task("0.3"), pytest.mark.task("0.4")]


def test_chat_answers_paris(smollm2_dir):
    result = miniyaie("chat", "--message", "What is the capital of France?", "--max-tokens", "24")
    assert result.returncode == 0, " | ".join(result.stderr.strip().splitlines()[-2:])
    assert "Paris" in result.stdout
