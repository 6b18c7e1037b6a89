"""A stub keeps no standard-library import that only its solution regions used.

`from collections import deque` at the top of a stubbed allocator tells the
learner which data structure to choose, and `import heapq` over a stubbed
eviction which algorithm. Once the regions are stubbed, such an import is
unused: it goes, and the learner imports what their own code needs. Imports of
the project's own modules stay: they point at provided code a task is meant to
call, which the book names anyway.
"""

from __future__ import annotations

import ast
import re
import sys


def _used_names(tree: ast.Module) -> set[str]:
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # names in quoted annotations
            used.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", node.value))
    return used


def _is_stdlib(node: ast.Import | ast.ImportFrom) -> bool:
    modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [alias.name for alias in node.names]
    roots = {module.split(".")[0] for module in modules}
    return bool(roots) and "__future__" not in roots and roots <= set(sys.stdlib_module_names)


def drop_unused_stdlib_imports(text: str) -> str:
    """`text` without its top-level standard-library imports whose names nothing else in it uses.

    An import statement goes whole when none of its names is used; a `from X import a, b` of which
    only some are used keeps those (on one line). Blank lines left behind are collapsed.
    """
    tree = ast.parse(text)
    used = _used_names(tree)
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (first line, end line, replacement), 0-based, end exclusive
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or not _is_stdlib(node):
            continue
        kept = [alias for alias in node.names if (alias.asname or alias.name).split(".")[0] in used]
        if len(kept) == len(node.names):
            continue
        replacement = ""
        if kept and isinstance(node, ast.ImportFrom):
            names = ", ".join(alias.name + (f" as {alias.asname}" if alias.asname else "") for alias in kept)
            replacement = f"from {'.' * node.level}{node.module or ''} import {names}\n"
        elif kept:
            replacement = "".join(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "") + "\n"
                                  for alias in kept)
        edits.append((node.lineno - 1, node.end_lineno, replacement))
    for first, end, replacement in reversed(edits):
        lines[first:end] = [replacement] if replacement else []
    return re.sub(r"\n{4,}", "\n\n\n", "".join(lines)) if edits else text
