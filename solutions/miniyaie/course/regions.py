"""Solution regions: the code a learner writes, marked in the reference tree, with its hint ladder.

A region looks like this in solutions/:

    # Nudge: normalise by the root mean square, not by the mean and variance.
    # Hint 1: the idea and the invariant to keep (prose, continuation
    #   lines indented by two more spaces).
    # Hint 2: the algorithm in words.
    # Hint 3:
    #   pseudocode, one step a line,
    #       indented as code is
    # BEGIN SOLUTION 0.1: RMSNorm
    ...reference code...
    # END SOLUTION

In the student tree the ladder and the region become the nudge, a TODO and
a `NotImplementedError` that names the chapter, the task and the book page;
the function's docstring (its contract) is outside the region and stays.
The ladder itself is printed by `miniyaie hint N.M` and shown in the book in
collapsible blocks (course/hints.py).

An old-style region has one `# Hint: ...` comment block instead (continued
by plain `# ...` lines): it is read as a one-level ladder so that `course
check` can name it as an error (every task has a full ladder).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION (?P<task>\d+\.\d+): (?P<what>\S.*?)\s*$")
END = re.compile(r"^[ \t]*# END SOLUTION\s*$")
_COMMENT = re.compile(r"^(?P<indent>[ \t]*)#(?P<text>.*)$")
_LEVEL = re.compile(r"^ Hint (?P<level>\d): ?(?P<text>.*)$")
_NUDGE = re.compile(r"^ Nudge: (?P<text>\S.*)$")
_LEGACY = re.compile(r"^ Hint: (?P<text>.*)$")
CONTINUATION = "   "  # after '#': a continuation line of a hint is indented by (at least) three spaces


class RegionError(ValueError):
    """Region markers that do not pair up, or a hint ladder that does not parse."""


@dataclass(frozen=True)
class Region:
    path: str  # relative to the tree root, e.g. "model/layers.py"
    task: str  # "0.1"
    what: str
    begin: int  # 1-based line of the BEGIN marker
    end: int  # 1-based line of the END marker
    indent: str
    hints_begin: int = 0  # 1-based first line of the ladder above BEGIN (== begin when there is none)
    nudge: str = ""  # the one line the stub keeps
    hints: tuple[str, ...] = field(default=())  # level 1, 2, 3, ... (level 3 keeps its line breaks)
    legacy: bool = False  # an old-style '# Hint:' block, kept in the stub as it was

    @property
    def chapter(self) -> int:
        return int(self.task.split(".")[0])

    @property
    def number(self) -> int:
        return int(self.task.split(".")[1])


def find_regions(text: str, path: str) -> list[Region]:
    lines = text.splitlines()
    regions: list[Region] = []
    open_match, open_line = None, 0
    for lineno, line in enumerate(lines, start=1):
        if (m := BEGIN.match(line)) is not None:
            if open_match is not None:
                raise RegionError(f"{path}:{lineno}: BEGIN SOLUTION inside the region opened at line {open_line}")
            open_match, open_line = m, lineno
        elif END.match(line):
            if open_match is None:
                raise RegionError(f"{path}:{lineno}: END SOLUTION without BEGIN SOLUTION")
            ladder = parse_ladder(lines, open_line, open_match["indent"], path)
            regions.append(
                Region(path, open_match["task"], open_match["what"], open_line, lineno, open_match["indent"], *ladder)
            )
            open_match = None
        elif "SOLUTION" in line and line.lstrip().startswith("# BEGIN"):
            raise RegionError(f"{path}:{lineno}: malformed marker, expected '# BEGIN SOLUTION N.M: what'")
    if open_match is not None:
        raise RegionError(f"{path}:{open_line}: BEGIN SOLUTION is never closed")
    return regions


def parse_ladder(lines: list[str], begin: int, indent: str, path: str) -> tuple[int, str, tuple[str, ...], bool]:
    """(first ladder line, nudge, hint levels, legacy) of the region whose BEGIN is on line `begin`.

    The ladder is the run of comment lines (at the marker's indent) right
    above BEGIN, from its first `# Nudge:` / `# Hint N:` line (or, old
    style, its `# Hint:` line); comments above that are the code's own.
    """
    block: list[str] = []  # the comment texts above BEGIN, top to bottom
    row = begin - 1  # 1-based line just above BEGIN
    while row >= 1 and (m := _COMMENT.match(lines[row - 1])) and m["indent"] == indent:
        block.insert(0, m["text"])
        row -= 1
    starts = [i for i, t in enumerate(block) if _NUDGE.match(t) or _LEVEL.match(t) or _LEGACY.match(t)]
    if not starts:
        return begin, "", (), False
    first = starts[0]
    block = block[first:]
    hints_begin = begin - len(block)
    if _LEGACY.match(block[0]):
        text = " ".join([_LEGACY.match(block[0])["text"], *(t.strip() for t in block[1:])]).strip()
        return hints_begin, "", (text,), True
    nudge, levels = "", {}
    current: list[str] | None = None
    for offset, text in enumerate(block):
        where = f"{path}:{hints_begin + offset}"
        if m := _NUDGE.match(text):
            if nudge:
                raise RegionError(f"{where}: a second '# Nudge:' line")
            nudge, current = m["text"].strip(), None
        elif m := _LEVEL.match(text):
            level = int(m["level"])
            if level != len(levels) + 1:
                raise RegionError(f"{where}: 'Hint {level}' follows 'Hint {len(levels)}': number the levels 1, 2, 3")
            current = levels[level] = [m["text"].rstrip()] if m["text"].strip() else []
        elif current is not None and (text.startswith(CONTINUATION) or not text.strip()):
            current.append(text)
        else:
            raise RegionError(
                f"{where}: expected '# Hint N: ...' or a continuation line indented by three spaces after '#'"
                + (" (a nudge is one line)" if current is None else "")
            )
    return hints_begin, nudge, tuple(_level_text(levels[n]) for n in sorted(levels)), False


def _level_text(lines: list[str]) -> str:
    """A level's text: its first line, then its continuation lines without their common indent."""
    head = [lines[0].strip()] if lines and not lines[0].startswith(" ") else []
    rest = lines[len(head) :]
    width = min((len(t) - len(t.lstrip()) for t in rest if t.strip()), default=0)
    return "\n".join(head + [t[width:].rstrip() for t in rest]).strip("\n")


def stub_lines(region: Region, page: str, keep_generator: bool = False) -> list[str]:
    """The stub of a region. `keep_generator`: the region holds every `yield` of its function."""
    message = f"Chapter {region.chapter}, Task {region.number}: {region.what} — see {page}"
    replace = "these lines" if keep_generator else "this line"
    lines = [
        f"{region.indent}# TODO(Task {region.task}): {region.what}. Replace {replace} with your code.",
        f"{region.indent}raise NotImplementedError({message!r})",
    ]
    if keep_generator:
        # Without a `yield` the function would stop being a generator: calling it would return a
        # coroutine or a value, and `for`/`async for` would fail with a confusing TypeError
        # instead of reaching the NotImplementedError above.
        lines.append(f"{region.indent}yield  # never runs: it keeps this function a generator, as its callers expect")
    return lines


def nudge_lines(region: Region) -> list[str]:
    """What the stub keeps of the ladder: the nudge, and where the hints are."""
    if region.legacy or not (region.nudge or region.hints):
        return []
    lines = [f"{region.indent}# Idea: {region.nudge}"] if region.nudge else []
    return lines + [f"{region.indent}# Stuck? `miniyaie hint {region.task}` prints hints, one level at a time."]


def stub_regions(text: str, regions: list[Region], page: str | Callable[[str], str]) -> str:
    """Replace the given regions of `text` (found by find_regions) and their ladders with stubs.

    `page` is the book page the stubs name, or a function from a task id to
    the page that holds that task (a chapter with several pages).
    """
    lines = text.splitlines()
    needs_yield = _regions_holding_every_yield(text, regions)
    page_of = page if callable(page) else lambda task: page
    for region in sorted(regions, key=lambda r: r.begin, reverse=True):
        first = region.begin if region.legacy else region.hints_begin or region.begin
        stub = stub_lines(region, page_of(region.task), region in needs_yield)
        lines[first - 1 : region.end] = nudge_lines(region) + stub
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


# ------------------------------------------------------------------ function kinds
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _own_nodes(function: ast.AST):
    """The nodes of a function's body, not those of functions, lambdas or classes nested in it."""
    todo = list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def _yield_lines(function: ast.AST) -> list[int]:
    return [n.lineno for n in _own_nodes(function) if isinstance(n, (ast.Yield, ast.YieldFrom))]


def _regions_holding_every_yield(text: str, regions: list[Region]) -> set[Region]:
    """Regions whose stub would turn their (innermost enclosing) generator function into a plain one."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()  # not Python we can read: stub it as it is
    functions = [n for n in ast.walk(tree) if isinstance(n, _FUNCTIONS)]
    found = set()
    for region in regions:
        around = [f for f in functions if f.lineno < region.begin <= f.end_lineno]  # the END marker may follow the last line
        if not around:
            continue
        innermost = max(around, key=lambda f: f.lineno)
        yields = _yield_lines(innermost)
        if yields and all(region.begin < line < region.end for line in yields):
            found.add(region)
    return found


def function_kinds(text: str) -> dict[str, str]:
    """Qualified name -> "generator", "async generator", "coroutine" or "function", for every def in `text`."""
    kinds: dict[str, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _FUNCTIONS):
                name = f"{prefix}{child.name}"
                is_generator = bool(_yield_lines(child))
                if isinstance(child, ast.AsyncFunctionDef):
                    kinds[name] = "async generator" if is_generator else "coroutine"
                else:
                    kinds[name] = "generator" if is_generator else "function"
                visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(text), "")
    return kinds
