"""Generate the student tree (chapters/) from the reference tree (solutions/).

`sync` writes it, `check` reports where the committed tree differs from what
`sync` would write. A manifest of the generated files' hashes lets `sync`
refuse to overwrite a file a learner has edited.
"""

from __future__ import annotations

import hashlib
import json

from miniyaie._switch import CHAPTERS_ROOT
from miniyaie.course import hints
from miniyaie.course.regions import find_regions, function_kinds, stub_regions
from miniyaie.course.registry import CHAPTERS
from miniyaie.course.sources import CHALLENGE_ENTRY, SKIP_DIRS, chapter_files, regions_of
from miniyaie.course.stub_imports import drop_unused_stdlib_imports

__all__ = ["MANIFEST", "chapter_files", "check", "generated_tree", "kind_changes", "regions_of", "sync"]

MANIFEST = CHAPTERS_ROOT.parent / ".generated.json"


def generated_tree() -> dict[str, str]:
    """Relative path under chapters/miniyaie -> content, for every chapter."""
    tree: dict[str, str] = {}
    for ch in CHAPTERS:
        for path in chapter_files(ch):
            rel = path.relative_to(ch.solution_dir.parent).as_posix()
            text = path.read_text()
            if path.suffix == ".py" and (regions := find_regions(text, rel)):
                text = drop_unused_stdlib_imports(stub_regions(text, regions, ch.page_of))
            tree[rel] = text
    return tree


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _manifest_text(tree: dict[str, str]) -> str:
    return json.dumps({rel: _digest(text) for rel, text in sorted(tree.items())}, indent=1) + "\n"


def _existing_files() -> set[str]:
    if not CHAPTERS_ROOT.is_dir():
        return set()
    return {
        p.relative_to(CHAPTERS_ROOT).as_posix()
        for p in CHAPTERS_ROOT.rglob("*")
        if p.is_file() and not SKIP_DIRS.intersection(p.parts) and p.suffix != ".pyc"
        and p.relative_to(CHAPTERS_ROOT).parts[1:] != (CHALLENGE_ENTRY,)  # a learner's challenge entry: theirs
    }


def check() -> list[str]:
    """Problems that make chapters/ or the book's hint pages stale; empty when they are up to date."""
    tree = generated_tree()
    problems = hints.check_pages()
    for rel, text in sorted(tree.items()):
        path = CHAPTERS_ROOT / rel
        if not path.is_file():
            problems.append(f"missing: chapters/miniyaie/{rel}")
        elif path.read_text() != text:
            problems.append(f"differs: chapters/miniyaie/{rel}")
    for rel in sorted(_existing_files() - tree.keys()):
        problems.append(f"not generated: chapters/miniyaie/{rel}")
    if not MANIFEST.is_file() or MANIFEST.read_text() != _manifest_text(tree):
        problems.append(f"stale manifest: {MANIFEST.relative_to(CHAPTERS_ROOT.parent.parent)}")
    return problems + kind_changes(tree)


def kind_changes(tree: dict[str, str]) -> list[str]:
    """Functions whose stub is not the same kind (generator, async generator, coroutine, plain) as the solution.

    A stub that turned a generator into a plain function would fail in its
    caller (`'async for' requires __aiter__`) instead of naming its task.
    """
    problems = []
    for ch in CHAPTERS:
        for path in chapter_files(ch):
            rel = path.relative_to(ch.solution_dir.parent).as_posix()
            if path.suffix != ".py" or rel not in tree:
                continue
            solution, stub = function_kinds(path.read_text()), function_kinds(tree[rel])
            for name in sorted(solution.keys() & stub.keys()):  # a def inside a region has no stub to compare
                if solution[name] != stub[name]:
                    problems.append(f"stub changes a function's kind: {rel}:{name} (solution: {solution[name]}, stub: {stub[name]})")
    return problems


def sync(force: bool = False) -> list[str]:
    """Write chapters/ from solutions/; returns the files written or removed (hints.write_pages does the book's part).

    A file whose content differs from what the last sync wrote was edited by
    hand (a learner's work): sync refuses to touch it unless `force`.
    """
    tree = generated_tree()
    previous = json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {}
    edited = [
        rel
        for rel in sorted(_existing_files())
        if rel in previous
        and _digest(current := (CHAPTERS_ROOT / rel).read_text()) != previous[rel]
        and tree.get(rel) != current
    ]
    if edited and not force:
        listing = ", ".join(f"chapters/miniyaie/{r}" for r in edited)
        raise RuntimeError(f"refusing to overwrite files edited by hand: {listing} (use --force)")
    changed = []
    for rel, text in tree.items():
        path = CHAPTERS_ROOT / rel
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(f"wrote chapters/miniyaie/{rel}")
    for rel in sorted((_existing_files() & previous.keys()) - tree.keys()):
        (CHAPTERS_ROOT / rel).unlink()  # generated before, no longer: only files sync itself wrote
        changed.append(f"removed chapters/miniyaie/{rel}")
    MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    MANIFEST.write_text(_manifest_text(tree))
    return changed
