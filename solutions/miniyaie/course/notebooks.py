"""Run the notebooks and render them as book pages with their outputs.

`notebooks/NN_name.md` (jupytext Markdown) becomes `book/src/nbNN_name.md`:
its prose, its code, the text each cell printed and its figures as PNG files
under `book/src/figures/`. Executing every notebook takes minutes, so the
rendered pages are committed; the first line of each page records a hash of
the notebook source, and `check` reports a page whose notebook changed since
(figures are not compared: they need not be byte-identical between runs).

Learners run a notebook on their own code with `miniyaie notebook NN`
(cli/notebook.py): the same execution, with the switch's selection passed
to the kernel, saved outside the book.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import sys
from pathlib import Path

from miniyaie._switch import CHAPTER_PACKAGES, ENV_VAR, REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"
BOOK_SRC = REPO_ROOT / "book" / "src"
FIGURES = BOOK_SRC / "figures"
_STAMP = re.compile(r"^<!-- rendered from (\S+) sha256 ([0-9a-f]{64}) ")


def sources() -> list[Path]:
    """Every notebook, in book order (its file name starts with its number)."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.md"))


def page_of(source: Path) -> Path:
    """notebooks/01_continuous_batching.md -> book/src/nb01_continuous_batching.md"""
    return BOOK_SRC / f"nb{source.name}"


def source_hash(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()


class NotebookError(Exception):
    """A notebook stopped: `cause` is nbclient's error, `notebook` holds the outputs of the cells that ran."""

    def __init__(self, cause: Exception, notebook):
        super().__init__(str(cause))
        self.cause, self.notebook = cause, notebook


def chapter_of(source: Path) -> int:
    """The chapter a notebook belongs to: the number its file name starts with."""
    return int(source.name[:2])


def learner_impl(source: Path) -> str:
    """The selection a learner's run defaults to: the notebook's chapter from chapters/, the reference for the rest."""
    return f"{CHAPTER_PACKAGES[chapter_of(source)]}=chapters"


def _kernel_manager():
    """A kernel manager whose kernel is this very Python, the one miniyaie is installed in.

    Not whatever kernel named "python3" Jupyter finds (a user-wide one may be
    another Python without miniyaie), and no `jupyter kernelspec install` needed.
    """
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
            return KernelSpec(argv=argv, display_name="Python 3", language="python", resource_dir="")

    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())


def execute(source: Path, timeout: int = 600, impl: str | None = None):
    """The notebook, executed top to bottom in a fresh kernel that runs in the notebook's folder.

    `impl` selects the trees the kernel imports (it is a child process: the
    selection reaches it as MINIYAIE_IMPL); None keeps this process's. Raises
    NotebookError when a cell fails or times out.
    """
    import jupytext
    import nbclient
    from jupyter_core.utils import run_sync
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # the kernel must draw inline, not to a file backend
    if impl is not None:
        env[ENV_VAR] = impl
    km = _kernel_manager()
    client = nbclient.NotebookClient(
        notebook, km=km, timeout=timeout, resources={"metadata": {"path": str(source.parent)}},
        extra_arguments=["--IPKernelApp.log_level=ERROR"],  # not its start-up chatter
    )
    try:
        client.execute(env=env)
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        raise NotebookError(exc, notebook) from exc
    finally:  # nbclient stops only a kernel whose manager it made itself: without this each kernel outlives its run
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    return notebook


def images(notebook) -> list[bytes]:
    """The PNG figures the executed notebook drew, in order."""
    return [
        base64.b64decode(output["data"]["image/png"])
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]


def _text_of(output) -> str:
    if output.output_type == "stream":  # stderr is warnings with this machine's paths, not the notebook's results
        return output.text if output.name == "stdout" else ""
    data = output.get("data", {})
    if "image/png" in data:
        return ""  # the figure is shown; its text repr ("<Figure size ...>") is noise
    return data.get("text/plain", "")


def _fence(text: str, lang: str) -> str:
    fence = "```"
    while fence in text:  # a fence longer than any run of backticks inside
        fence += "`"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}\n"


def note_of(source: Path) -> str:
    """The line under a page's title: what the page is and the command that runs it on the reader's code."""
    number = source.name[:2]
    return (
        f"> This page is the notebook `{source.relative_to(REPO_ROOT).as_posix()}` run top to bottom on the reference,"
        f" with what it printed and drew. Run it on your own code with `miniyaie notebook {number}`"
        f" (your chapter {chapter_of(source)} from `chapters/`, the reference for the rest; `--impl chapters` for all"
        f" of yours): it saves the executed notebook and its figures under `notebook-runs/{source.stem}/`."
        f" See [How to use this book](how_to_use.md#notebooks-run-them-on-your-code).\n"
    )


def render(source: Path, notebook) -> tuple[str, dict[str, bytes]]:
    """(page text, figure file name -> PNG bytes) for an executed notebook."""
    rel = source.relative_to(REPO_ROOT).as_posix()
    stem = page_of(source).stem
    parts = [
        f"<!-- rendered from {rel} sha256 {source_hash(source)} by `miniyaie course notebooks`; edit the notebook, not this page -->\n"
    ]
    figures: dict[str, bytes] = {}
    note = note_of(source)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown":
            text = cell.source.rstrip() + "\n"
            if index == 0 and text.startswith("# "):  # the note goes right under the title
                title, _, rest = text.partition("\n")
                parts += [title + "\n", note] + ([rest.lstrip("\n")] if rest.strip() else [])
            else:
                parts.append(text)
            continue
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        parts.append(_fence(cell.source, "python"))
        printed = "".join(_text_of(output) for output in cell.get("outputs", []))
        if printed.strip():
            parts.append(_fence(printed, "text"))
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                name = f"{stem}-{len(figures) + 1}.png"
                figures[name] = base64.b64decode(png)
                parts.append(f"![Figure {len(figures)} of this notebook](figures/{name})\n")
    if note not in parts:
        parts.insert(1, note)
    return "\n".join(parts), figures


def write(source: Path, page: str, figures: dict[str, bytes]) -> list[Path]:
    """Write the page and its figures, removing the notebook's old figures."""
    stem = page_of(source).stem
    FIGURES.mkdir(parents=True, exist_ok=True)
    for old in FIGURES.glob(f"{stem}-*.png"):
        old.unlink()
    written = [page_of(source)]
    page_of(source).write_text(page)
    for name, png in figures.items():
        (FIGURES / name).write_bytes(png)
        written.append(FIGURES / name)
    return written


def save_run(source: Path, notebook, out: Path) -> list[Path]:
    """Write an executed (or partly executed) notebook as `out/<stem>.ipynb` and its figures as PNG files beside it."""
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{source.stem}-*.png"):  # a previous run's figures
        old.unlink()
    ipynb = out / f"{source.stem}.ipynb"
    nbformat.write(notebook, ipynb)
    written = [ipynb]
    for number, png in enumerate(images(notebook), start=1):
        written.append(out / f"{source.stem}-{number}.png")
        written[-1].write_bytes(png)
    return written


def select(names: list[str]) -> list[Path]:
    """The notebooks named by number (`01`), stem or file name; all when none is named."""
    if not names:
        return sources()
    chosen = []
    for name in names:
        name = f"{int(name):02d}" if name.isdigit() else name  # 3 -> 03
        hits = [s for s in sources() if name in {s.name, s.stem, s.stem[:2]}]
        if not hits:
            raise ValueError(f"no notebook {name!r}; notebooks are {', '.join(s.stem for s in sources())}")
        chosen += hits
    return chosen


def render_all(chosen: list[Path]) -> int:
    """Execute and render each notebook; a notebook that fails leaves its old page and stops the run."""
    import time

    for source in chosen:
        start = time.perf_counter()
        print(f"running {source.relative_to(REPO_ROOT).as_posix()} ...", flush=True)
        page, figures = render(source, execute(source, impl="solutions"))  # the book shows the reference
        for path in write(source, page, figures):
            print(f"  wrote {path.relative_to(REPO_ROOT).as_posix()}")
        print(f"  {time.perf_counter() - start:.0f} s", flush=True)
    return 0


def check() -> list[str]:
    """Problems that make the rendered pages stale; empty when they are up to date."""
    problems = []
    for source in sources():
        page = page_of(source)
        rel = page.relative_to(REPO_ROOT).as_posix()
        if not page.is_file():
            problems.append(f"missing: {rel} (render {source.name})")
            continue
        text = page.read_text()
        stamp = _STAMP.match(text)
        if not stamp or stamp.group(2) != source_hash(source):
            problems.append(f"stale: {rel} was rendered from another version of {source.name}")
        elif note_of(source) not in text:
            problems.append(f"stale: {rel} does not carry the current note under its title (render {source.name})")
        for figure in re.findall(r"\]\((figures/[^)]+\.png)\)", text):
            if not (BOOK_SRC / figure).is_file():
                problems.append(f"missing figure: book/src/{figure} (shown by {rel})")
    rendered_from = {page_of(s) for s in sources()}
    for page in sorted(BOOK_SRC.glob("nb*.md")):
        if _STAMP.match(page.read_text()) and page not in rendered_from:
            problems.append(f"orphan: {page.relative_to(REPO_ROOT).as_posix()} has no notebook any more")
    return problems
