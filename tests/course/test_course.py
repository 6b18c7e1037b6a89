"""One source for two trees, and the switch that selects what is graded (not graded itself)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from miniyaie import _switch
from miniyaie.course import sync
from miniyaie.course.regions import RegionError, find_regions, stub_regions
from miniyaie.course.registry import CHAPTERS, chapter
from miniyaie.course.sources import chapter_files
from miniyaie.course.stub_imports import drop_unused_stdlib_imports

pytestmark = pytest.mark.ungraded
REPO = Path(__file__).resolve().parents[2]


def test_chapters_tree_is_generated_from_solutions():
    assert sync.check() == [], "run `miniyaie course sync` and commit chapters/"


def test_every_region_becomes_a_stub_naming_chapter_task_and_page():
    for ch in CHAPTERS:
        for region in sync.regions_of(ch):
            student = (REPO / "chapters" / "miniyaie" / region.path).read_text()
            page = ch.page_of(region.task)
            message = f"Chapter {region.chapter}, Task {region.number}: {region.what} — see {page}"
            assert f"raise NotImplementedError({message!r})" in student
            assert region.chapter == ch.number, f"{region.path}: task {region.task} is in chapter {ch.number}'s package"
            assert f"### Task {region.task}: " in (REPO / page).read_text(), f"{page} does not hold Task {region.task}"


def test_a_task_is_found_on_the_page_that_holds_it():
    engine = chapter(5)
    assert engine.pages[0] == engine.page == "book/src/ch05_engine.md"
    assert engine.page_of("5.1") == "book/src/ch05_engine.md"
    assert engine.page_of("5.9") == engine.pages[1] != engine.page, "chapter 5's second page holds the loop's tasks"
    assert engine.page_of("5.99") == engine.page, "a task no page holds (yet) points at the chapter's first page"
    assert chapter(1).pages == (chapter(1).page,) and chapter(1).page_of("1.1") == chapter(1).page


def test_a_region_stub_names_the_page_its_task_is_on():
    text = "def f():\n    # BEGIN SOLUTION 5.9: Pack\n    pass\n    # END SOLUTION\n"
    stubbed = stub_regions(text, find_regions(text, "engine/f.py"), chapter(5).page_of)
    assert "see book/src/ch05_engine_loop.md'" in stubbed


def test_stubbing_keeps_everything_outside_the_region():
    text = "def f(x):\n    # Hint: add one.\n    # BEGIN SOLUTION 3.2: Add one\n    y = x + 1\n    return y\n    # END SOLUTION\n\nZ = 1\n"
    (region,) = find_regions(text, "radix/f.py")
    assert (region.task, region.what, region.begin, region.end) == ("3.2", "Add one", 3, 6)
    stubbed = stub_regions(text, [region], "book/src/ch03_radix_tree.md")
    assert stubbed.startswith("def f(x):\n    # Hint: add one.\n")
    assert "x + 1" not in stubbed and stubbed.endswith("\nZ = 1\n")
    assert "raise NotImplementedError('Chapter 3, Task 2: Add one — see book/src/ch03_radix_tree.md')" in stubbed


@pytest.mark.parametrize(
    "text",
    [
        "# BEGIN SOLUTION 0.1: a\n",  # never closed
        "# END SOLUTION\n",  # never opened
        "# BEGIN SOLUTION 0.1: a\n# BEGIN SOLUTION 0.2: b\n# END SOLUTION\n",  # nested
        "# BEGIN SOLUTION: no task id\n# END SOLUTION\n",
    ],
)
def test_malformed_regions_are_rejected(text):
    with pytest.raises(RegionError):
        find_regions(text, "x.py")


def test_impl_spec_selects_per_chapter():
    solutions, chapters = _switch.SOLUTIONS_ROOT, _switch.CHAPTERS_ROOT
    assert set(_switch.parse_impl("solutions").values()) == {solutions}
    assert set(_switch.parse_impl("chapters").values()) == {chapters}
    mix = _switch.parse_impl("scheduler=chapters")
    assert mix["scheduler"] == chapters and mix["model"] == solutions
    assert _switch.parse_impl("chapters,0=solutions")["model"] == solutions
    assert _switch.parse_impl("chapters,0=solutions")["radix"] == chapters
    clone_chapters = str(chapters.parent)  # another clone's tree, named by the folder above its package
    assert _switch.parse_impl(f"scheduler={clone_chapters}")["scheduler"] == chapters
    assert _switch.parse_impl(f"scheduler={chapters}")["scheduler"] == chapters
    for bad in ("nonsense", "spaceship=chapters", "model=/no/such/dir"):
        with pytest.raises(_switch.ImplError):
            _switch.parse_impl(bad)


def test_student_tree_raises_the_named_error_through_miniyaie_imports():
    code = (
        "import torch, miniyaie.model as m; print(m.__file__);"
        "m.rms_norm(torch.ones(2), torch.ones(2), 1e-6)"
    )
    env = {**os.environ, _switch.ENV_VAR: "model=chapters"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "chapters/miniyaie/model/__init__.py" in result.stdout
    assert "NotImplementedError: Chapter 0, Task 1: RMSNorm and SwiGLU in the checkpoint's precision — see book/src/ch00_model.md" in result.stderr


def test_sync_refuses_to_overwrite_a_learners_edit(tmp_path, monkeypatch):
    root = tmp_path / "chapters" / "miniyaie"
    monkeypatch.setattr(sync, "CHAPTERS_ROOT", root)
    monkeypatch.setattr(sync, "MANIFEST", root.parent / ".generated.json")
    sync.sync()
    assert sync.check() == []
    edited = root / "model" / "layers.py"
    edited.write_text(edited.read_text() + "\n# my work\n")
    (root / "model" / "scratch.py").write_text("x = 1\n")  # a learner's own file
    with pytest.raises(RuntimeError, match="edited by hand"):
        sync.sync()
    assert edited.read_text().endswith("# my work\n")
    sync.sync(force=True)
    assert (root / "model" / "scratch.py").exists(), "sync only ever deletes files it generated"
    assert sync.check() == ["not generated: chapters/miniyaie/model/scratch.py"]


def test_ci_runs_the_readmes_test_command():
    readme = (REPO / "README.md").read_text()
    commands = [line.strip() for line in readme.splitlines() if line.strip().startswith(("python3 -m venv", "bash", "pip"))]
    ci = (REPO / ".ci" / "run").read_text()
    assert len(commands) >= 2, "the README starts with its two commands"
    assert commands[1] in ci, ".ci/run must run exactly the README's second command"


def _names_after_a_stub_that_only_the_region_defined(stub: str) -> list[str]:
    """In `stub` (a generated file), names read after a stub's raise in the same block that neither the
    stub's function nor the module defines: code the learner cannot run and must guess a name for."""
    import ast
    import builtins

    tree = ast.parse(stub)
    module = set(dir(builtins))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            module.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            module |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        defined = module | {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
        defined |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for block in ast.walk(function):
            body = getattr(block, "body", None)
            if not isinstance(body, list):
                continue
            for i, statement in enumerate(body):
                if isinstance(statement, ast.Raise) and "NotImplementedError('Chapter" in ast.unparse(statement):
                    found += [f"{function.name}: {name.id!r} (line {after.lineno})" for after in body[i + 1 :]
                              for name in ast.walk(after)
                              if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Load) and name.id not in defined]
    return found


@pytest.mark.parametrize("number", [ch.number for ch in CHAPTERS])
def test_no_stub_keeps_code_after_its_raise_that_reads_a_name_only_the_region_defined(number):
    """A region that assigns a name the code after END SOLUTION reads leaves, in the stub, unreachable code
    using a name the learner must guess: the region must take that code in."""
    ch = chapter(number)
    problems = []
    for solution in [path for path in chapter_files(ch) if path.suffix == ".py"]:  # what sync copies into chapters/
        stub = REPO / "chapters" / "miniyaie" / solution.relative_to(ch.solution_dir.parent)
        problems += [f"{stub.relative_to(REPO)}: {p}" for p in
                     _names_after_a_stub_that_only_the_region_defined(stub.read_text())]
    assert not problems, "\n".join(problems)


def test_a_stub_keeps_no_standard_library_import_only_its_solution_used():
    """`from collections import deque` over a stubbed allocator names the data structure to choose."""
    text = (
        "from __future__ import annotations\n\nimport heapq\nimport math\nfrom collections import Counter, deque\n"
        "from miniyaie.paged import grow_block_table\n\n\ndef f(x: 'Counter') -> float:\n    return math.sqrt(x)\n"
    )
    assert drop_unused_stdlib_imports(text) == (
        "from __future__ import annotations\n\nimport math\nfrom collections import Counter\n"
        "from miniyaie.paged import grow_block_table\n\n\ndef f(x: 'Counter') -> float:\n    return math.sqrt(x)\n"
    )
    one = "from __future__ import annotations\n\nfrom collections import deque\n\n\nclass A:\n    pass\n"
    assert drop_unused_stdlib_imports(one) == "from __future__ import annotations\n\n\nclass A:\n    pass\n"
    allocator = (REPO / "chapters" / "miniyaie" / "paged" / "allocator.py").read_text()
    assert "deque" not in allocator and "heapq" not in (REPO / "chapters" / "miniyaie" / "radix" / "tree.py").read_text()


def test_test_modules_have_names_no_other_folder_uses():
    """The test folders are not packages: pytest imports each test module by its file name, so two folders with a
    test_kernel.py make the second fail to collect ("import file mismatch") in a run of the whole suite."""
    from collections import Counter

    names = Counter(path.name for path in (_switch.REPO_ROOT / "tests").rglob("*.py") if path.name != "conftest.py")
    assert not [name for name, count in names.items() if count > 1], [n for n, c in names.items() if c > 1]
