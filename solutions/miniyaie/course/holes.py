"""`miniyaie course holes N`: prove that chapter N's tests notice every missing piece.

(a) With the whole student tree selected for the chapter, every graded test
    of the chapter must fail.
(b) With only one solution region stubbed (the rest reference), at least one
    graded test must fail; pytest stops at the first failure to stay fast.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from miniyaie.course.grade import format_table
from miniyaie.course.regions import Region, find_regions, stub_regions
from miniyaie.course.registry import chapter
from miniyaie.course.sync import regions_of
from miniyaie.course.testrun import run_tests

GRADED = ["-m", "not ungraded"]


def _tree_with_one_stub(region: Region, page: str, tmp: Path) -> Path:
    """A copy of the chapter's reference package with `region` alone stubbed."""
    ch = chapter(region.chapter)
    root = tmp / "miniyaie"
    shutil.copytree(ch.solution_dir, root / ch.package, ignore=shutil.ignore_patterns("__pycache__"))
    target = root / region.path
    text = target.read_text()
    same = [r for r in find_regions(text, region.path) if r.begin == region.begin]
    target.write_text(stub_regions(text, same, page))
    return root


def holes(number: int) -> int:
    ch = chapter(number)
    regions = regions_of(ch)
    if not regions:
        print(f"Chapter {number} has no solution regions yet.")
        return 0
    failures = 0

    print(f"(a) chapter {number}: student tree ({ch.package}=chapters), every graded test must fail", flush=True)
    results = [r for r in run_tests([ch.tests], f"{ch.package}=chapters", GRADED) if r.graded]
    survivors = [r for r in results if r.outcome != "failed"]
    if not results:
        print("    no graded tests found: hole")
        failures += 1
    for r in survivors:
        print(f"    HOLE: {r.nodeid} {r.outcome} against the stubs")
    failures += len(survivors)
    print(f"    {len(results) - len(survivors)}/{len(results)} graded tests fail as they should")

    print(f"(b) chapter {number}: each region stubbed alone must fail a test", flush=True)
    rows = []
    for region in regions:
        with tempfile.TemporaryDirectory() as tmp:
            root = _tree_with_one_stub(region, ch.page, Path(tmp))
            results = run_tests([ch.tests], f"{ch.package}={root}", [*GRADED, "-x"])
        caught = next((r.nodeid for r in results if r.outcome == "failed"), None)
        failures += caught is None
        rows.append([region.task, region.what, f"{region.path}:{region.begin}", caught or "HOLE: no test fails"])
        print(f"    {region.task} {region.what}: {caught or 'HOLE'}", flush=True)
    print(format_table(rows, ["task", "region", "file:line", "caught by"]))
    print(f"Chapter {number}: {'no holes' if failures == 0 else f'{failures} hole(s)'}.")
    return 0 if failures == 0 else 1
