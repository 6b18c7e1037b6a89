"""The `miniyaie chat` command answers with our own forward pass.

`--attention-backend reference` runs chapter 0's code everywhere: the default on a CPU (`cpu`)
swaps in fused C++ layers and attention (chapter 5's "Making it fast"), which would answer
without the learner's RMSNorm, RoPE, SwiGLU and attention."""

import os
import subprocess
import sys

import pytest
from cli_helpers import miniyaie


# End to end: needs every task of the chapter.
pytestmark = [pytest.mark.task("0.1"), pytest.mark.task("0.2"), pytest.mark.task("0.3"), pytest.mark.task("0.4"), pytest.mark.bundled_model]


def test_chat_answers_paris(smollm2_dir):
    result = miniyaie("chat", "--message", "What is the capital of France?", "--max-tokens", "24", "--attention-backend", "reference")
    assert result.returncode == 0, " | ".join(result.stderr.strip().splitlines()[-2:])
    assert "Paris" in result.stdout


def test_interactive_chat_keeps_the_conversation(smollm2_dir):
    result = subprocess.run(
        [sys.executable, "-m", "miniyaie", "chat", "--max-tokens", "12", "--attention-backend", "reference"],
        input="What is the capital of France?\nAnd of Italy?\n", capture_output=True, text=True, timeout=300, env=os.environ.copy(),
    )
    assert result.returncode == 0, " | ".join(result.stderr.strip().splitlines()[-2:])
    answers = [a.strip() for a in result.stdout.split("> ")[1:] if a.strip()]
    assert len(answers) == 2 and "Paris" in answers[0]
    # Asked alone, "And of Italy?" gets no capital from this model: "Rome" needs the first turn.
    assert "Rome" in answers[1]
