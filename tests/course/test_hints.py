"""The hint ladders: parsed, complete, kept out of the stubs, shown in the book and by `miniyaie hint` (not graded)."""

import re
from pathlib import Path

import pytest

from miniyaie.cli import main
from miniyaie.course import hints, sync
from miniyaie.course.regions import RegionError, find_regions, stub_regions
from miniyaie.course.registry import CHAPTERS
from miniyaie.course.share import learner_share

pytestmark = pytest.mark.ungraded
REPO = Path(__file__).resolve().parents[2]

LADDER = """\
def f(x):
    \"\"\"Add one.\"\"\"
    # ordinary comment, not a hint
    # Nudge: count one more.
    # Hint 1: The idea, over
    #   two lines.
    # Hint 2: The algorithm.
    # Hint 3:
    #   y = x + 1
    #   if y:
    #       return y
    # BEGIN SOLUTION 3.2: Add one
    return x + 1
    # END SOLUTION
"""


def test_a_ladder_is_parsed_and_only_the_nudge_reaches_the_stub():
    (region,) = find_regions(LADDER, "radix/f.py")
    assert region.nudge == "count one more."
    assert region.hints == ("The idea, over\ntwo lines.", "The algorithm.", "y = x + 1\nif y:\n    return y")
    assert (region.hints_begin, region.begin, region.legacy) == (4, 12, False)
    stub = stub_regions(LADDER, [region], "book/src/ch03_radix_tree.md")
    assert "# ordinary comment, not a hint" in stub, "comments above the ladder are the code's own"
    assert "Hint" not in stub and "x + 1" not in stub and "The idea" not in stub
    assert "# Idea: count one more." in stub and "miniyaie hint 3.2" in stub
    assert '"""Add one."""' in stub, "the contract (docstring) stays"


def test_an_old_style_hint_is_named_as_an_error_in_every_chapter():
    text = "def f():\n    # Hint: do it\n    # in two lines.\n    # BEGIN SOLUTION 4.1: It\n    pass\n    # END SOLUTION\n"
    (region,) = find_regions(text, "kernels/f.py")
    assert region.legacy and region.hints == ("do it in two lines.",)
    (error,) = hints.ladder_problems(region)
    assert "old-style '# Hint:'" in error and "kernels/f.py:4 (Task 4.1)" in error


@pytest.mark.parametrize(
    "ladder, problem",
    [
        ("    # Hint 2: skipped one\n", "Hint 2"),
        ("    # Nudge: one\n    #   a second nudge line\n", "a nudge is one line"),
        ("    # Hint 1: x\n    # not indented\n", "continuation"),
    ],
)
def test_a_malformed_ladder_is_an_error_naming_the_line(ladder, problem):
    text = f"def f():\n{ladder}    # BEGIN SOLUTION 1.1: It\n    pass\n    # END SOLUTION\n"
    with pytest.raises(RegionError, match=problem):
        find_regions(text, "scheduler/f.py")


def test_every_region_has_a_full_ladder():
    """Every chapter: a nudge and three levels above every region."""
    errors = hints.all_problems()
    assert not errors, "\n".join(errors)
    for ch in CHAPTERS:
        for region in sync.regions_of(ch):
            assert len(region.hints) >= hints.LEVELS and region.nudge, f"Task {region.task}: incomplete ladder"


def test_stubs_keep_the_nudge_but_no_hint_and_the_book_shows_the_ladder_after_the_stub():
    for ch in CHAPTERS:
        for task, regions in hints.task_regions(sync.regions_of(ch)).items():
            if any(r.legacy or not r.hints for r in regions):
                continue
            page = (REPO / ch.page_of(task)).read_text()
            for region in regions:
                student = (REPO / "chapters" / "miniyaie" / region.path).read_text()
                assert f"# Idea: {region.nudge}" in student
            student_files = {r.path for r in regions}
            for path in student_files:
                text = (REPO / "chapters" / "miniyaie" / path).read_text()
                assert not re.search(r"#\s*Hint \d:", text), f"chapters/miniyaie/{path} prints a hint level"
            heading = page.index(f"### Task {task}: ")
            end = page.find("\n### Task ", heading + 1)
            section = page[heading : end if end > 0 else len(page)]
            include = f"{{{{#include hints/{task}.md}}}}"
            assert include in section, f"{ch.page_of(task)}: Task {task} does not include its hints ({include})"
            stubs = [m.start() for m in re.finditer(r"\{\{#include \.\./\.\./chapters/", section)]
            assert stubs and max(stubs) < section.index(include), f"Task {task}: the hints come after the stub"
    assert hints.check_pages() == [], "run `miniyaie course sync`"


def test_the_book_renders_each_level_in_a_collapsible_block():
    page = (hints.HINTS_DIR / "1.4.md").read_text()
    summaries = re.findall(r"<details><summary>Hint (\d)", page)
    assert summaries == ["1", "2", "3"]
    assert page.count("</details>") == 3 and "```text" in page, "level 3 is pseudocode in a code block"


def test_miniyaie_hint_prints_one_level_at_a_time(capsys):
    assert main(["hint", "1.4"]) == 0
    one = capsys.readouterr().out
    assert "Hint 1" in one and "Hint 2" not in one and "--level 2" in one
    assert main(["hint", "1.4", "--level", "3"]) == 0
    three = capsys.readouterr().out
    assert "Hint 1" in three and "Hint 2" in three and "Hint 3" in three
    assert "while" in three, "the pseudocode of the budget loop"
    assert main(["hint", "2.1", "--level", "2"]) == 0
    assert "allocate" in capsys.readouterr().out, "a task with several regions names each function"
    assert main(["hint", "1.99"]) == 2 and "no task 1.99" in capsys.readouterr().err


@pytest.mark.parametrize("number", [ch.number for ch in CHAPTERS])
def test_the_learner_writes_a_fifth_of_each_chapter(number):
    share = learner_share(number)
    print(f"chapter {number}: {share.learner_lines} of {share.code_lines} code lines learner-written ({share.fraction:.0%})")
    assert share.fraction >= 0.20, f"chapter {number}: {share.fraction:.1%} of the code is learner-written"
