"""How much of a chapter's code the learner writes: lines inside solution regions / code lines of its package.

A code line is a non-blank line that is not a comment (docstrings count:
they are part of the code a learner reads). The markers and the hint
ladders are comments, so they count on neither side.
"""

from __future__ import annotations

from dataclasses import dataclass

from miniyaie.course.grade import format_table
from miniyaie.course.registry import chapter
from miniyaie.course.regions import find_regions
from miniyaie.course.sync import chapter_files


@dataclass(frozen=True)
class Share:
    chapter: int
    learner_lines: int
    code_lines: int

    @property
    def fraction(self) -> float:
        return self.learner_lines / self.code_lines if self.code_lines else 0.0


def _is_code(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def learner_share(number: int) -> Share:
    ch = chapter(number)
    learner = total = 0
    for path in chapter_files(ch):
        if path.suffix != ".py":
            continue
        text = path.read_text()
        inside = {n for r in find_regions(text, path.name) for n in range(r.begin + 1, r.end)}
        for lineno, line in enumerate(text.splitlines(), start=1):
            if _is_code(line):
                total += 1
                learner += lineno in inside
    return Share(number, learner, total)


def format_shares(numbers: list[int]) -> str:
    rows = []
    for number in numbers:
        s = learner_share(number)
        rows.append([str(number), chapter(number).package, str(s.learner_lines), str(s.code_lines), f"{s.fraction:.0%}"])
    return format_table(rows, ["chapter", "package", "learner-written", "code lines", "share"])
