"""The one switch that selects which implementation of each chapter is imported.

Every import of chapter code goes through `miniyaie.<package>` (for example
`miniyaie.model`). A meta-path finder reroutes that package to the tree that
`MINIYAIE_IMPL` (or `pytest --impl`) selects:

    solutions                      everything from the reference (default)
    chapters                       everything from the student tree
    model=chapters                 chapter 0 from the student tree, rest reference
    chapters,model=solutions       the student tree except chapter 0
    0=chapters                     chapters may be named by number too
    model=/some/dir/miniyaie       a tree on disk (used by `course holes`)

Because modules inside a chapter also import each other through `miniyaie.`,
a chapter taken from the student tree uses the reference for everything else.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

ENV_VAR = "MINIYAIE_IMPL"
SOLUTIONS_ROOT = Path(__file__).resolve().parent  # solutions/miniyaie
REPO_ROOT = SOLUTIONS_ROOT.parent.parent
CHAPTERS_ROOT = REPO_ROOT / "chapters" / "miniyaie"

# chapter number -> package name, in book order. The registry in
# miniyaie/course/registry.py adds titles and book pages.
CHAPTER_PACKAGES: dict[int, str] = {
    0: "model",
    1: "scheduler",
    2: "paged",
    3: "radix",
    4: "kernels",
    5: "engine",
    6: "api",
    7: "distributed",
    8: "structured",
    9: "speculative",
    10: "quant",
    11: "lora",
}
_PACKAGE_NAMES = set(CHAPTER_PACKAGES.values())


class ImplError(ValueError):
    """A malformed MINIYAIE_IMPL / --impl value."""


def _tree_root(value: str) -> Path:
    if value == "solutions":
        return SOLUTIONS_ROOT
    if value == "chapters":
        return CHAPTERS_ROOT
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise ImplError(f"implementation {value!r} is neither 'solutions', 'chapters' nor a directory")
    if path.name != "miniyaie" and (path / "miniyaie").is_dir():
        path = path / "miniyaie"  # a tree given by the folder above its package (another clone's `chapters`)
    return path


def parse_impl(spec: str | None) -> dict[str, Path]:
    """Map every chapter package to the directory its code is imported from."""
    default = SOLUTIONS_ROOT
    overrides: dict[str, Path] = {}
    for item in (spec or "solutions").split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            default = _tree_root(item)
            continue
        key, value = (part.strip() for part in item.split("=", 1))
        if key.isdigit() and int(key) in CHAPTER_PACKAGES:
            key = CHAPTER_PACKAGES[int(key)]
        if key not in _PACKAGE_NAMES:
            known = ", ".join(f"{n}={p}" for n, p in CHAPTER_PACKAGES.items())
            raise ImplError(f"unknown chapter {key!r} in {ENV_VAR}; known: {known}")
        overrides[key] = _tree_root(value)
    return {name: overrides.get(name, default) for name in _PACKAGE_NAMES}


def selected_root(package: str) -> Path:
    """The directory that `miniyaie.<package>` is imported from right now."""
    return parse_impl(os.environ.get(ENV_VAR))[package]


class _ChapterFinder(importlib.abc.MetaPathFinder):
    """Finds `miniyaie.<chapter package>` in the selected tree.

    Only the chapter package itself is rerouted; its submodules are then found
    through the package's `__path__` as usual.
    """

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, name = fullname.partition(".")
        if prefix != "miniyaie" or name not in _PACKAGE_NAMES:
            return None
        root = selected_root(name)
        if root == SOLUTIONS_ROOT:
            return None  # the normal import finds the reference
        package_dir = root / name
        init = package_dir / "__init__.py"
        if not init.is_file():
            raise ImportError(f"{fullname}: {init} does not exist (selected by {ENV_VAR})")
        return importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[str(package_dir)]
        )


def _is_chapter_module(name: str) -> bool:
    parts = name.split(".")
    return len(parts) >= 2 and parts[0] == "miniyaie" and parts[1] in _PACKAGE_NAMES


def select(spec: str) -> None:
    """Select implementations for this process; must run before chapter code is imported."""
    parse_impl(spec)  # fail early on a bad value
    loaded = sorted(name for name in sys.modules if _is_chapter_module(name))
    if loaded and spec != os.environ.get(ENV_VAR, "solutions"):
        raise ImplError(f"cannot switch implementations after importing {loaded[0]}")
    os.environ[ENV_VAR] = spec


def install() -> None:
    if not any(isinstance(f, _ChapterFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _ChapterFinder())
