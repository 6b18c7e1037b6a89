"""Small modules with one job: no module of the reference tree is over 300 lines.

The hint ladders above solution regions are not counted: the student tree
drops them (`miniyaie hint N.M` prints them), and a learner never reads them
as part of the module.
"""

import pytest

from miniyaie._switch import SOLUTIONS_ROOT
from miniyaie.course.regions import find_regions

pytestmark = pytest.mark.ungraded
LIMIT = 300


def _code_lines(path) -> int:
    text = path.read_text()
    ladders = sum(r.begin - r.hints_begin for r in find_regions(text, str(path)) if r.hints_begin and not r.legacy)
    return len(text.splitlines()) - ladders


def test_no_module_is_over_300_lines():
    sizes = {p.relative_to(SOLUTIONS_ROOT).as_posix(): _code_lines(p) for p in SOLUTIONS_ROOT.rglob("*.py")}
    assert len(sizes) > 50, "the reference tree was not found"
    too_long = {name: n for name, n in sizes.items() if n > LIMIT}
    assert not too_long, f"modules over {LIMIT} lines (split them by job): {too_long}"
