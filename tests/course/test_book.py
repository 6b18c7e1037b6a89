"""The book, the code and the tests never drift apart (fast checks with precise messages; the real mdBook build is in test_book_build.py)."""

import ast
import re
from pathlib import Path

import pytest

from miniyaie.course import sync
from miniyaie.course.registry import CHAPTERS

pytestmark = pytest.mark.ungraded
REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "book" / "src"
INCLUDE = re.compile(r"\{\{#include ([^}:]+)(?::([^}]+))?\}\}")
TASK_HEADING = re.compile(r"^### Task (\d+\.\d+): (.+)$", re.M)


def pages() -> list[Path]:
    return sorted(SRC.rglob("*.md"))


def test_every_summary_link_exists():
    summary = (SRC / "SUMMARY.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", summary)
    assert links
    for link in links:
        assert (SRC / link).is_file(), f"SUMMARY.md links to missing {link}"
    for ch in CHAPTERS:
        for page in ch.pages:
            assert Path(page).name in links, f"chapter {ch.number}'s page {page} is not in SUMMARY.md"
        order = [links.index(Path(page).name) for page in ch.pages]
        assert order == sorted(order), f"SUMMARY.md lists chapter {ch.number}'s pages out of the registry's order"


def _anchor_lines(text: str, anchor: str) -> tuple[int, int]:
    lines = text.splitlines()
    begin = [i for i, line in enumerate(lines) if re.search(rf"ANCHOR: {re.escape(anchor)}\s*$", line)]
    end = [i for i, line in enumerate(lines) if re.search(rf"ANCHOR_END: {re.escape(anchor)}\s*$", line)]
    assert len(begin) == 1 and len(end) == 1 and begin[0] < end[0], f"anchor {anchor!r} must open once and close once"
    return begin[0], end[0]


def test_every_include_and_anchor_exists():
    found = 0
    for page in pages():
        for path, anchor in INCLUDE.findall(page.read_text()):
            target = (page.parent / path.strip()).resolve()
            assert target.is_file(), f"{page.name} includes missing {path}"
            assert REPO in target.parents, f"{page.name} includes {path} from outside the repository"
            if anchor:
                assert not anchor.replace(":", "").isdigit(), f"{page.name}: include {path} by anchor, not line numbers"
                _anchor_lines(target.read_text(), anchor)
            found += 1
    assert found, "the book shows code from solutions/ through includes"


def _test_functions(path: Path) -> dict[str, set[str]]:
    """'name' or 'Class::name' -> the task ids marked directly on that test function."""
    tree = ast.parse(path.read_text())
    out: dict[str, set[str]] = {}

    def tasks_of(fn) -> set[str]:
        return {
            d.args[0].value
            for d in fn.decorator_list
            if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "task" and d.args
        }

    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            out[node.name] = tasks_of(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                    out[f"{node.name}::{item.name}"] = tasks_of(item)
    return out


def _sections(text: str) -> dict[str, tuple[str, str]]:
    """task id -> (heading title, section body)."""
    matches = list(TASK_HEADING.finditer(text))
    return {
        m.group(1): (m.group(2).strip(), text[m.end() : matches[i + 1].start() if i + 1 < len(matches) else len(text)])
        for i, m in enumerate(matches)
    }


@pytest.mark.parametrize("ch", [ch for ch in CHAPTERS if sync.regions_of(ch)], ids=lambda ch: f"chapter{ch.number}")
def test_every_task_names_its_file_command_and_existing_tests(ch):
    regions = sync.regions_of(ch)
    sections: dict[str, tuple[str, str]] = {}
    for page in ch.pages:  # a chapter may have several pages; each task is on one of them
        on_page = _sections((REPO / page).read_text())
        twice = sorted(set(on_page) & set(sections))
        assert not twice, f"{page}: Task(s) {', '.join(twice)} also on an earlier page of chapter {ch.number}"
        assert all(ch.page_of(task) == page for task in on_page), f"{page}: page_of disagrees with the book"
        sections.update(on_page)
    assert set(sections) == {r.task for r in regions}, "one book section per task, no more, no less"
    book_order = sorted(sections, key=lambda task: int(task.split(".")[1]))
    assert list(sections) == book_order, f"chapter {ch.number}'s tasks must come in their order across its pages"
    marked: dict[str, set[str]] = {}  # task -> test ids marked with it directly
    for test_file in sorted((REPO / ch.tests).glob("test_*.py")):
        for name, tasks in _test_functions(test_file).items():
            for task in tasks:
                marked.setdefault(task, set()).add(f"{test_file.relative_to(REPO).as_posix()}::{name}")
    for task, (title, body) in sections.items():
        task_regions = [r for r in regions if r.task == task]
        assert title == task_regions[0].what, f"Task {task}: heading must be the region's name {task_regions[0].what!r}"
        file_line = re.search(r"^- \*\*File:\*\* `([^`]+)`(?:, function `(\w+)`)?", body, re.M)
        assert file_line, f"Task {task}: missing '- **File:**' line"
        student_file = REPO / file_line.group(1)
        assert student_file.is_file(), f"Task {task}: {file_line.group(1)} does not exist"
        assert any(("chapters/miniyaie/" + r.path) == file_line.group(1) for r in task_regions), f"Task {task}: wrong file"
        if file_line.group(2):
            assert f"def {file_line.group(2)}(" in student_file.read_text()
        run_line = re.search(r"^- \*\*Run:\*\* (.+)$", body, re.M)
        assert run_line and f"`miniyaie grade {task}`" in run_line.group(1), f"Task {task}: the Run line must give `miniyaie grade {task}`"
        tests_line = re.search(r"^- \*\*Tests:\*\* (.+)$", body, re.M)
        assert tests_line, f"Task {task}: missing '- **Tests:**' line"
        listed = set(re.findall(r"`([^`]+)`", tests_line.group(1)))
        assert listed == marked.get(task, set()), f"Task {task}: the book's test ids and the tests marked task({task!r}) differ"
        pytest_command = re.search(r"`pytest ([^`]+)`", run_line.group(1))
        if pytest_command:  # the command must reach every file of the task's tests (a file or a folder above it)
            paths = [arg for arg in pytest_command.group(1).split() if arg.startswith("tests/")]
            missed = sorted({t.split("::")[0] for t in listed if not any(t.split("::")[0].startswith(p) for p in paths)})
            assert not missed, f"Task {task}: the Run line's pytest command misses {missed}"


def _innermost_def(source: str, line: int) -> str:
    """The name of the innermost function or class whose body holds `line` (a region's BEGIN marker)."""
    found = [
        (node.lineno, node.name)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.lineno < line <= node.end_lineno + 1
    ]
    return max(found)[1] if found else ""


@pytest.mark.parametrize("ch", [ch for ch in CHAPTERS if sync.regions_of(ch)], ids=lambda ch: f"chapter{ch.number}")
def test_a_tasks_file_line_names_every_file_and_function_it_has_regions_in(ch):
    sections: dict[str, tuple[str, str]] = {}
    for page in ch.pages:
        if (REPO / page).is_file():
            sections.update(_sections((REPO / page).read_text()))
    problems = []
    for region in sync.regions_of(ch):
        file_line = re.search(r"^- \*\*File:\*\* (.+)$", sections.get(region.task, ("", ""))[1], re.M)
        if not file_line:
            continue  # the test above names a task with no section or no File line
        named = set(re.findall(r"`([^`]+)`", file_line.group(1)))
        names = {part for name in named for part in name.split(".")} | named
        function = _innermost_def((ch.solution_dir.parent / region.path).read_text(), region.begin)
        if f"chapters/miniyaie/{region.path}" not in named:
            problems.append(f"Task {region.task}: its File line does not name chapters/miniyaie/{region.path}")
        elif function and function not in names:
            problems.append(f"Task {region.task}: its File line does not name `{function}` ({region.path}:{region.begin})")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- no answer before its task

SOLUTION_BEGIN = re.compile(r"#\s*BEGIN SOLUTION (\d+\.\d+)")
ANSWER_PAGES = re.compile(r"^answers_ch\d\d\.md$")  # worked answers, allowed to show solutions


def _included_text(target: Path, anchor: str) -> str:
    text = target.read_text()
    if not anchor:
        return text
    begin, end = _anchor_lines(text, anchor)
    return "\n".join(text.splitlines()[begin : end + 1])


def solution_leaks(page: Path, earlier: frozenset[str] = frozenset()) -> list[str]:
    """Includes on this page that show a solution region above its task's heading (or with no such task).

    `earlier`: the tasks on the chapter's earlier pages, whose answers may be shown anywhere on this one.
    """
    text = page.read_text()
    task_starts = {m.group(1): m.start() for m in TASK_HEADING.finditer(text)} | {task: -1 for task in earlier}
    leaks = []
    for include in INCLUDE.finditer(text):
        path, anchor = include.group(1).strip(), include.group(2) or ""
        for task in SOLUTION_BEGIN.findall(_included_text((page.parent / path).resolve(), anchor)):
            if task not in task_starts or include.start() < task_starts[task]:
                leaks.append(f"{page.name} shows the answer to Task {task} ({path}:{anchor}) before its task")
    return leaks


def _tasks_on_earlier_pages() -> dict[str, frozenset[str]]:
    """Page name -> the tasks on the earlier pages of its chapter."""
    out = {}
    for ch in CHAPTERS:
        seen: set[str] = set()
        for page in ch.pages:
            out[Path(page).name] = frozenset(seen)
            if (REPO / page).is_file():
                seen |= set(_sections((REPO / page).read_text()))
    return out


def test_no_page_includes_a_solution_before_its_task():
    earlier = _tasks_on_earlier_pages()
    leaks = [
        leak
        for page in pages()
        if not ANSWER_PAGES.match(page.name)
        for leak in solution_leaks(page, earlier.get(page.name, frozenset()))
    ]
    assert not leaks, "\n".join(leaks)


def test_the_leak_check_catches_a_leak_and_allows_it_after_the_task(tmp_path):
    solved = next(p for p in sorted((REPO / "solutions").rglob("*.py")) if SOLUTION_BEGIN.search(p.read_text()))
    task = SOLUTION_BEGIN.search(solved.read_text()).group(1)
    page = tmp_path / "page.md"
    page.write_text(f"# Chapter\n\n{{{{#include {solved}}}}}\n\n### Task {task}: it\n")
    assert len(solution_leaks(page)) >= 1
    page.write_text(f"# Chapter\n\n### Task {task}: it\n\n{{{{#include {solved}}}}}\n")
    assert not [leak for leak in solution_leaks(page) if f"Task {task} " in leak]
    page.write_text(f"# Chapter, its second page\n\n{{{{#include {solved}}}}}\n")
    assert not [leak for leak in solution_leaks(page, frozenset({task})) if f"Task {task} " in leak], (
        "a task on an earlier page of the chapter comes before every include of this one")


# ---------------------------------------------------------------- notebook pages

def test_every_notebook_has_a_fresh_rendered_page_in_the_summary():
    from miniyaie.course import notebooks

    summary = (SRC / "SUMMARY.md").read_text()
    links = set(re.findall(r"\]\(([^)]+)\)", summary))
    for source in notebooks.sources():
        assert notebooks.page_of(source).name in links, f"SUMMARY.md does not list the page of {source.name}"
    assert notebooks.check() == [], "run `miniyaie course notebooks`"


def test_a_changed_notebook_makes_its_page_stale(tmp_path, monkeypatch):
    from miniyaie.course import notebooks

    source = tmp_path / "notebooks" / "07_demo.md"
    source.parent.mkdir()
    source.write_text("# Demo\n")
    monkeypatch.setattr(notebooks, "NOTEBOOKS", source.parent)
    monkeypatch.setattr(notebooks, "BOOK_SRC", tmp_path / "src")
    monkeypatch.setattr(notebooks, "FIGURES", tmp_path / "src" / "figures")
    monkeypatch.setattr(notebooks, "REPO_ROOT", tmp_path)
    assert notebooks.check() == ["missing: src/nb07_demo.md (render 07_demo.md)"]
    import nbformat

    executed = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Demo")])
    (tmp_path / "src").mkdir()
    notebooks.write(source, *notebooks.render(source, executed))
    assert notebooks.check() == []
    source.write_text("# Demo, edited\n")
    assert notebooks.check() == ["stale: src/nb07_demo.md was rendered from another version of 07_demo.md"]
