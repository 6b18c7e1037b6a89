"""`miniyaie notebook NN`: run a chapter's notebook on your code and save it, executed, with its figures.

The book's notebook pages show the reference. This runs the same notebook
with your chapter selected (the switch's MINIYAIE_IMPL, passed to the
notebook's kernel) and writes the executed .ipynb and its PNG figures
outside the book. An unfinished chapter is reported as the task to do,
not as a traceback.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from miniyaie.cli.args import UsageError, positive_int

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME = re.compile(r"^(?:File|Cell) .*$", re.MULTILINE)  # IPython's "File path:line, in name" / "Cell In[3], line 4"


def add_parsers(sub) -> None:
    p = sub.add_parser("notebook", help="run a chapter's notebook on your code; save it executed, with its figures")
    p.add_argument("name", help="the notebook: its number (03), its name, or the path of a jupytext .md notebook")
    p.add_argument("--impl", default=None,
                   help="which trees (default: the notebook's chapter from chapters/, the reference for the rest); "
                        "'chapters' = all of yours, 'solutions' = the reference")
    p.add_argument("--out", default=None, metavar="DIR", help="where to write (default: notebook-runs/NN_name/)")
    p.add_argument("--timeout", type=positive_int, default=900, help="seconds a cell may run (default 900)")
    p.set_defaults(handler=cmd_notebook)


def cmd_notebook(args: argparse.Namespace) -> int:
    from miniyaie import _switch
    from miniyaie.course import notebooks

    source = _source(args.name)
    impl = args.impl or _default_impl(source)
    try:
        selection = _switch.parse_impl(impl)
    except _switch.ImplError as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.out) if args.out else Path("notebook-runs") / source.stem
    if out.resolve().is_relative_to(notebooks.BOOK_SRC.resolve()):
        raise UsageError(f"--out {out}: book/src holds the book's pages (the reference's runs); write elsewhere")
    print(f"Running {_shown(source)} with {_switch.ENV_VAR}={impl} ({_describe(selection)}) ...", flush=True)
    started = time.perf_counter()
    try:
        executed = notebooks.execute(source, timeout=args.timeout, impl=impl)
    except notebooks.NotebookError as exc:
        written = notebooks.save_run(source, exc.notebook, out)
        print(_explain(source, exc, impl))
        print(f"The cells that ran, with their outputs, are in {_shown(written[0])}.")
        return 1
    written = notebooks.save_run(source, executed, out)
    print(f"Ran in {time.perf_counter() - started:.0f} s. Wrote:")
    for path in written:
        print(f"  {_shown(path)}")
    print("Open the .ipynb in Jupyter or VS Code to read it with its outputs.")
    return 0


def _source(name: str) -> Path:
    from miniyaie.course import notebooks

    path = Path(name)
    if path.suffix == ".md" and path.is_file():
        return path.resolve()
    try:
        chosen = notebooks.select([name])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return chosen[0]


def _default_impl(source: Path) -> str:
    """The notebook's own chapter from chapters/; all of your chapters for a notebook that names none."""
    from miniyaie._switch import CHAPTER_PACKAGES
    from miniyaie.course import notebooks

    numbered = source.name[:2].isdigit() and int(source.name[:2]) in CHAPTER_PACKAGES
    return notebooks.learner_impl(source) if numbered else "chapters"


def _describe(selection: dict[str, Path]) -> str:
    from miniyaie._switch import CHAPTER_PACKAGES, SOLUTIONS_ROOT

    yours = [str(n) for n, package in CHAPTER_PACKAGES.items() if selection[package] != SOLUTIONS_ROOT]
    if not yours:
        return "the reference for every chapter"
    rest = "" if len(yours) == len(CHAPTER_PACKAGES) else ", the reference for the rest"
    return f"your chapter{'s' if len(yours) > 1 else ''} {', '.join(yours)}{rest}"


def _explain(source: Path, error, impl: str) -> str:
    """What stopped the notebook, in a few lines: the unfinished task, or the error and where it was raised."""
    from nbclient.exceptions import CellExecutionError

    from miniyaie.course.grade import stub_hit

    cause = error.cause
    where = _failed_cell(error.notebook)
    if not isinstance(cause, CellExecutionError):  # a cell ran past --timeout, or the kernel died
        return f"{_shown(source)} stopped{where}: {str(cause).strip().splitlines()[-1]}"
    raised = f"{cause.ename}: {cause.evalue}"
    frames = _FRAME.findall(_ANSI.sub("", cause.traceback))
    at = f"\n  at {frames[-1].removeprefix('File ')}" if frames else ""
    # a stub's error may come through repr() (Triton's interpreter wraps it): NotImplementedError('Chapter ...
    task = stub_hit(re.sub(r"NotImplementedError\(['\"]", "NotImplementedError: ", raised))
    if task is None:
        return f"{_shown(source)} failed{where}:\n  {raised}{at}"
    chapter = task.split(".")[0]
    return (
        f"{_shown(source)} stopped{where}: your chapter {chapter} is not finished (Task {task}).\n"
        f"  {raised}{at}\n"
        f"Do that task (`miniyaie grade {chapter}` shows every task's status), or run the reference for that chapter: "
        f"miniyaie notebook {source.name[:2]} --impl {_without(impl, chapter)}"
    )


def _failed_cell(notebook) -> str:
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for number, cell in enumerate(code, start=1):
        if any(output.get("output_type") == "error" for output in cell.get("outputs", [])):
            return f" in code cell {number} of {len(code)}"
    return ""


def _without(impl: str, chapter: str) -> str:
    """The same selection with the reference for chapter `chapter`."""
    from miniyaie._switch import CHAPTER_PACKAGES

    package = CHAPTER_PACKAGES[int(chapter)]
    items = [item.strip() for item in impl.split(",") if item.strip()]
    kept = [item for item in items if item.split("=")[0].strip() not in {package, chapter}]
    if any("=" not in item for item in kept):  # another default tree: override this chapter alone
        kept.append(f"{package}=solutions")
    return ",".join(kept) or "solutions"


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the current folder when inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)
