"""A chapter's reference files and the solution regions in them: what sync, hints and grading read."""

from __future__ import annotations

from pathlib import Path

from miniyaie.course.regions import Region, find_regions
from miniyaie.course.registry import Chapter

SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints"}
# A chapter package's challenge.py is an entry to `miniyaie challenge N`, not course code: the reference's
# stays in solutions/ (never copied into chapters/), and a learner's in chapters/ is theirs alone.
CHALLENGE_ENTRY = "challenge.py"


def chapter_files(ch: Chapter) -> list[Path]:
    """The reference files of a chapter, sorted; empty if the chapter is not written yet."""
    if not ch.solution_dir.is_dir():
        return []
    return sorted(
        p
        for p in ch.solution_dir.rglob("*")
        if p.is_file() and not SKIP_DIRS.intersection(p.parts) and p.suffix not in {".pyc", ".pyo"}
        and not (p.name == CHALLENGE_ENTRY and p.parent == ch.solution_dir)
    )


def regions_of(ch: Chapter) -> list[Region]:
    regions: list[Region] = []
    for path in chapter_files(ch):
        if path.suffix == ".py":
            rel = path.relative_to(ch.solution_dir.parent).as_posix()
            regions += find_regions(path.read_text(), rel)
    return regions
