"""Which planted bugs this commit tries (one slice of each chapter's mutants, a different slice each commit),
and whose grading holes it checks (one group of chapters, a different group each commit).

Trying every mutant of every chapter takes far longer than CI may run, and a
fixed sample would leave the same mutants untried forever. So each chapter's
mutants are split into `slices_of(chapter)` slices by a hash of the mutant's
name (its file and lines, without line numbers, so a mutant keeps its slice
while other code changes), and a commit tries slice `turn % slices`, where
the turn is the commit's number on its branch (`git rev-list --count HEAD`).
Successive commits take successive slices, so any `slices` successive commits
between them try every mutant. The turn is printed with the slice; `--turn T`
repeats it anywhere, and `--all` tries every mutant at once.

`course holes` without chapter numbers checks the chapters of one group, by
the same turn: HOLES_GROUPS splits the chapters into groups of about equal
cost (a chapter not in the table is checked at every turn), so any
len(HOLES_GROUPS) successive commits check every chapter; `--all` checks
every chapter at once, and chapter numbers check those chapters.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from miniyaie._switch import REPO_ROOT

# Slices per chapter, from each chapter's mutant count and the time one of its mutants takes (chapter 4
# runs Triton's interpreter; chapter 5 builds tiny models and engines for each), so that one slice of
# every chapter fits CI's time. Every mutant is tried within max(SLICES.values()) successive commits.
SLICES: dict[int, int] = {0: 8, 1: 8, 2: 6, 3: 6, 4: 32, 5: 24, 6: 12, 7: 10, 8: 24, 9: 16}
DEFAULT_SLICES = 12

# Chapters whose holes one commit checks, by turn: about 130 s each on 2 cores (2026-11-29: chapter 0 105 s,
# 5 100, 8 90, 4 85, 6 75, 7 50, 2 45, 9 40, 11 30, 1 13, 10 11, 3 5).
HOLES_GROUPS: list[tuple[int, ...]] = [(0, 1, 3), (5, 11), (8, 9), (4, 2), (6, 7, 10)]


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


def holes_in_turn(chapters: list[int], turn: int) -> list[int]:
    """Of `chapters`, those whose holes are checked at `turn`: its group's, and any chapter in no group."""
    grouped = {number for group in HOLES_GROUPS for number in group}
    group = HOLES_GROUPS[turn % len(HOLES_GROUPS)]
    return [number for number in chapters if number in group or number not in grouped]


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
