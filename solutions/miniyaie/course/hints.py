"""The hint ladders of the tasks: checked, printed (`miniyaie hint`) and rendered for the book.

Every solution region carries a ladder above its BEGIN marker (see
regions.py): a one-line nudge that the stub keeps, then hints of increasing
strength that only `miniyaie hint N.M --level L` and the book's collapsible
blocks show:

    level 1  the idea, and the invariant to keep
    level 2  the algorithm, in words
    level 3  pseudocode

The book includes one generated file per task, book/src/hints/N.M.md, right
after the task's stub; `course sync` writes them and `course check` fails
when one is stale.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from miniyaie._switch import REPO_ROOT
from miniyaie.course.regions import Region
from miniyaie.course.registry import CHAPTERS
from miniyaie.course.sources import regions_of

LEVELS = 3
LEVEL_NAMES = {1: "the idea", 2: "the algorithm in words", 3: "pseudocode"}
HINTS_DIR = REPO_ROOT / "book" / "src" / "hints"
MAX_NUDGE = 110  # characters: a nudge names the idea, it does not spell the steps


def ladder_problems(region: Region) -> list[str]:
    """What is wrong with one region's ladder (nothing: an empty list)."""
    where = f"{region.path}:{region.begin} (Task {region.task})"
    if region.legacy or not region.hints:
        what = "an old-style '# Hint:' (a one-level ladder)" if region.legacy else "no hint ladder"
        message = f"{where}: {what}; write '# Nudge:' and '# Hint 1:' .. '# Hint 3:' above BEGIN"
        return [message]
    errors = []
    if len(region.hints) < LEVELS:
        errors.append(f"{where}: {len(region.hints)} hint level(s); a ladder has {LEVELS} (idea, algorithm, pseudocode)")
    if not region.nudge:
        errors.append(f"{where}: no '# Nudge:' line (the one line the stub keeps)")
    elif len(region.nudge) > MAX_NUDGE:
        errors.append(f"{where}: the nudge is {len(region.nudge)} characters; keep it under {MAX_NUDGE}")
    errors += [f"{where}: Hint {n} is empty" for n, text in enumerate(region.hints, 1) if not text.strip()]
    return errors


def function_of(region: Region, root: Path) -> str:
    """The name of the function (Class.method) whose body holds the region."""
    return _functions(str(root / region.path), (root / region.path).read_text()).get(region.begin, "")


@lru_cache(maxsize=64)
def _functions(path: str, text: str) -> dict[int, str]:
    """line -> the innermost function holding it, for every line inside a function."""
    found: dict[int, str] = {}

    def walk(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                for line in range(child.lineno, child.end_lineno + 1):
                    found[line] = name
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
    walk(ast.parse(text, path), "")
    return found


def task_regions(regions: list[Region]) -> dict[str, list[Region]]:
    """task -> its regions, in source order."""
    by_task: dict[str, list[Region]] = {}
    for region in regions:
        by_task.setdefault(region.task, []).append(region)
    return by_task


def render_task(task: str, regions: list[Region], root: Path) -> str:
    """The book's include for one task: each level in a collapsible block, weakest first."""
    levels = max(len(r.hints) for r in regions)
    named = len(regions) > 1
    out = ["<!-- generated from the hint ladders in solutions/ by `miniyaie course sync`; do not edit -->", ""]
    for level in range(1, levels + 1):
        out += [f"<details><summary>Hint {level}: {LEVEL_NAMES.get(level, 'more')}</summary>", ""]
        for region in regions:
            if level > len(region.hints):
                continue
            text = region.hints[level - 1]
            if named:
                out += [f"In `{function_of(region, root)}`:", ""]
            if level == LEVELS:
                out += ["```text", text, "```", ""]
            else:
                out += [text, ""]
        out += ["</details>", ""]
    return "\n".join(out)


def generated_pages(root: Path | None = None) -> dict[str, str]:
    """File name under book/src/hints/ -> content, for every task with a full ladder."""
    pages = {}
    for ch in CHAPTERS:
        regions = regions_of(ch)
        for task, rs in task_regions(regions).items():
            if any(r.legacy or not r.hints for r in rs):
                continue  # old style: the stub keeps its hint, there is no ladder to show
            pages[f"{task}.md"] = render_task(task, rs, root or ch.solution_dir.parent)
    return pages


def check_pages() -> list[str]:
    pages = generated_pages()
    problems = []
    for name, text in sorted(pages.items()):
        path = HINTS_DIR / name
        if not path.is_file():
            problems.append(f"missing: book/src/hints/{name}")
        elif path.read_text() != text:
            problems.append(f"differs: book/src/hints/{name}")
    existing = {p.name for p in HINTS_DIR.glob("*.md")} if HINTS_DIR.is_dir() else set()
    problems += [f"not generated: book/src/hints/{name}" for name in sorted(existing - pages.keys())]
    return problems


def write_pages() -> list[str]:
    """Write book/src/hints/ (the whole folder is generated); returns what changed."""
    pages = generated_pages()
    HINTS_DIR.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in sorted(pages.items()):
        path = HINTS_DIR / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            changed.append(f"wrote book/src/hints/{name}")
    for path in sorted(HINTS_DIR.glob("*.md")):
        if path.name not in pages:
            path.unlink()
            changed.append(f"removed book/src/hints/{path.name}")
    return changed


def all_problems() -> list[str]:
    """The ladder problems of every region of every chapter."""
    return [problem for ch in CHAPTERS for region in regions_of(ch) for problem in ladder_problems(region)]


def format_ladder(task: str, regions: list[Region], level: int, root: Path) -> str:
    """`miniyaie hint`'s text: the hints of `task` up to `level`."""
    first = regions[0]
    functions = ", ".join(dict.fromkeys(f"`{function_of(r, root)}`" for r in regions))
    files = ", ".join(dict.fromkeys(f"chapters/miniyaie/{r.path}" for r in regions))
    out = [f"Task {task}: {first.what}  ({files}, {functions})"]
    out.append("The contract is the docstring above the stub; the book's task section says what the tests check.")
    most = max(len(r.hints) for r in regions)
    if most == 0:
        return "\n".join(out + ["This task has no hints yet."])
    for n in range(1, min(level, most) + 1):
        out += ["", f"Hint {n} ({LEVEL_NAMES.get(n, 'more')}):"]
        for region in regions:
            if n > len(region.hints):
                continue
            if len(regions) > 1:
                out.append(f"  in {function_of(region, root)}:")
            out += [f"    {line}" if line else "" for line in region.hints[n - 1].splitlines()]
    if level < most:
        out += ["", f"Still stuck? `miniyaie hint {task} --level {level + 1}` ({most - level} more level(s))."]
    elif level > most:
        out += ["", f"(Task {task} has {most} level(s); that was all of them.)"]
    return "\n".join(out)
