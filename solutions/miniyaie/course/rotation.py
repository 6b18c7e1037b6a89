"""Which planted bugs this commit tries: one slice of each chapter's mutants, a different slice each commit.

Trying every mutant of every chapter takes far longer than CI may run, and a
fixed sample would leave the same mutants untried forever. So each chapter's
mutants are split into `slices_of(chapter)` slices by a hash of the mutant's
name (its file and lines, without line numbers, so a mutant keeps its slice
while other code changes), and a commit tries slice `turn % slices`, where
the turn is the commit's number on its branch (`git rev-list --count HEAD`).
Successive commits take successive slices, so any `slices` successive commits
between them try every mutant. The turn is printed with the slice; `--turn T`
repeats it anywhere, and `--all` tries every mutant at once.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from miniyaie._switch import REPO_ROOT

# Slices per chapter, from each chapter's mutant count and the time one of its mutants takes (chapter 4
# runs Triton's interpreter; chapter 5 builds tiny models and engines for each), so that one slice of
# every chapter fits CI's time. Every mutant is tried within max(SLICES.values()) successive commits.
SLICES: dict[int, int] = {0: 4, 1: 6, 2: 4, 3: 6, 4: 16, 5: 16, 6: 8, 7: 6, 8: 10, 9: 8}
DEFAULT_SLICES = 8


def slices_of(chapter: int) -> int:
    return SLICES.get(chapter, DEFAULT_SLICES)


def slice_of(key: tuple[str, ...], slices: int) -> int:
    """The slice a mutant named `key` belongs to: stable across runs, machines and Python versions."""
    digest = hashlib.sha256("\n".join(key).encode()).digest()
    return int.from_bytes(digest[:8], "big") % slices


def in_turn(key: tuple[str, ...], chapter: int, turn: int) -> bool:
    """Whether the mutant named `key` is tried at `turn` (each is tried once in any `slices_of` turns in a row)."""
    slices = slices_of(chapter)
    return slice_of(key, slices) == turn % slices


def commit_turn(repo: Path = REPO_ROOT) -> tuple[int, str]:
    """(the turn for the commit checked out in `repo`, how it was found): the commit's number on its branch.

    A shallow clone cannot count its commits; there the commit hash picks the turn (each slice then
    comes up at random, not in order), and a tree outside git takes turn 0. The text says which.
    """
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        if git("rev-parse", "--is-shallow-repository") == "true":
            return int(commit, 16), f"commit {commit} (a shallow clone: the turn is its hash)"
        count = int(git("rev-list", "--count", "HEAD"))
    except (OSError, subprocess.CalledProcessError, ValueError) as exc:
        return 0, f"turn 0 (no git history here: {type(exc).__name__})"
    return count, f"commit {commit}, number {count} on its branch"
