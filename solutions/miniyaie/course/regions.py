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

import ast
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


def stub_regions(text: str, regions: list[Region], page: str) -> str:
    """Replace the given regions of `text` (found by find_regions) with stubs."""
    lines = text.splitlines()
    needs_yield = _regions_holding_every_yield(text, regions)
    for region in sorted(regions, key=lambda r: r.begin, reverse=True):
        lines[region.begin - 1 : region.end] = stub_lines(region, page, region in needs_yield)
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
