"""Solution regions: the code a learner writes, marked in the reference tree.

A region looks like this (the hint comments above it are kept in both trees):

    # Hint: divide by the root mean square, then scale by the weight.
    # BEGIN SOLUTION 0.1: RMSNorm
    ...reference code...
    # END SOLUTION

In the student tree the region becomes a TODO and a `NotImplementedError`
that names the chapter, the task and the book page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION (?P<task>\d+\.\d+): (?P<what>\S.*?)\s*$")
END = re.compile(r"^[ \t]*# END SOLUTION\s*$")


class RegionError(ValueError):
    """Region markers that do not pair up."""


@dataclass(frozen=True)
class Region:
    path: str  # relative to the tree root, e.g. "model/layers.py"
    task: str  # "0.1"
    what: str
    begin: int  # 1-based line of the BEGIN marker
    end: int  # 1-based line of the END marker
    indent: str

    @property
    def chapter(self) -> int:
        return int(self.task.split(".")[0])

    @property
    def number(self) -> int:
        return int(self.task.split(".")[1])


def find_regions(text: str, path: str) -> list[Region]:
    regions: list[Region] = []
    open_match, open_line = None, 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if (m := BEGIN.match(line)) is not None:
            if open_match is not None:
                raise RegionError(f"{path}:{lineno}: BEGIN SOLUTION inside the region opened at line {open_line}")
            open_match, open_line = m, lineno
        elif END.match(line):
            if open_match is None:
                raise RegionError(f"{path}:{lineno}: END SOLUTION without BEGIN SOLUTION")
            regions.append(
                Region(path, open_match["task"], open_match["what"], open_line, lineno, open_match["indent"])
            )
            open_match = None
        elif "SOLUTION" in line and line.lstrip().startswith("# BEGIN"):
            raise RegionError(f"{path}:{lineno}: malformed marker, expected '# BEGIN SOLUTION N.M: what'")
    if open_match is not None:
        raise RegionError(f"{path}:{open_line}: BEGIN SOLUTION is never closed")
    return regions


def stub_lines(region: Region, page: str) -> list[str]:
    message = f"Chapter {region.chapter}, Task {region.number}: {region.what} — see {page}"
    return [
        f"{region.indent}# TODO(Task {region.task}): {region.what}. Replace this line with your code.",
        f"{region.indent}raise NotImplementedError({message!r})",
    ]


def stub_regions(text: str, regions: list[Region], page: str) -> str:
    """Replace the given regions of `text` (found by find_regions) with stubs."""
    lines = text.splitlines()
    for region in sorted(regions, key=lambda r: r.begin, reverse=True):
        lines[region.begin - 1 : region.end] = stub_lines(region, page)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")
