"""The chapter pages' figures: drawn by code in this package, rebuilt with `miniyaie course figures`.

One module per figure (`chNN_<name>.py`), each with
    NAME       the file it draws: book/src/figures/<NAME>.png
    PAGE       the chapter page that shows it (book/src/<PAGE>)
    data()     what the figure shows, as plain JSON-able values: cheap (no
               matplotlib, no model), computed by the chapter's real components
               where the figure shows their state
    draw(data) the matplotlib Figure

Redrawing is cheap but needs matplotlib, so tests do not redraw: each
figure's stamp is a hash of its module's source, the shared style and the
JSON of its data, recorded in book/src/figures/chapter_figures.json when it
is drawn. `check` recomputes the stamps (data() only) and reports a figure
whose code or data changed since it was drawn: a change in a chapter's
component that changes what the figure shows makes it stale, one that does
not, does not.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from pathlib import Path
from types import ModuleType

from miniyaie._switch import REPO_ROOT

BOOK_SRC = REPO_ROOT / "book" / "src"
FIGURES = BOOK_SRC / "figures"
MANIFEST = FIGURES / "chapter_figures.json"
MODULES = (
    "ch00_kv_cache", "ch01_batching_timeline", "ch02_block_table", "ch03_radix_tree",
    "ch04_split_kv", "ch05_engine_step", "ch05_step_roofline", "ch05_overlap_timeline", "ch05_engine_loop_timeline", "ch07_tensor_parallel", "ch08_byte_automaton",
    "ch09_verify_step", "ch10_block_layout", "ch11_lora_segments",
)


def modules() -> list[ModuleType]:
    """Every figure's module, in book order."""
    return [importlib.import_module(f"{__name__}.{name}") for name in MODULES]


def path_of(module: ModuleType) -> Path:
    return FIGURES / f"{module.NAME}.png"


def stamp(module: ModuleType, data) -> str:
    """sha256 of the module's source, the shared style's source and the figure's data."""
    from miniyaie.course.figures import style

    digest = hashlib.sha256()
    for part in (inspect.getsource(module), inspect.getsource(style), json.dumps(data, sort_keys=True)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _manifest() -> dict[str, str]:
    return json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {}


def select(names: list[str]) -> list[ModuleType]:
    """The figures named by chapter number (`3`, `03`), module or file name; all when none is named."""
    if not names:
        return modules()
    chosen = []
    for name in names:
        key = f"ch{int(name):02d}" if name.isdigit() else name
        hits = [m for m in modules() if key in {m.__name__.rsplit(".", 1)[1], m.NAME} or m.NAME.startswith(key + "_")]
        if not hits:
            raise ValueError(f"no figure {name!r}; figures are {', '.join(m.NAME for m in modules())}")
        chosen += hits
    return chosen


def build(chosen: list[ModuleType]) -> list[Path]:
    """Draw each chosen figure into book/src/figures/ and record its stamp."""
    import matplotlib

    matplotlib.use("Agg")
    from miniyaie.course.figures import style

    FIGURES.mkdir(parents=True, exist_ok=True)
    manifest, written = _manifest(), []
    for module in chosen:
        data = module.data()
        manifest[module.NAME] = stamp(module, data)  # before drawing: a draw may annotate its data
        style.save(module.draw(data), path_of(module))
        written.append(path_of(module))
    MANIFEST.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return written


def check() -> list[str]:
    """Problems that make the figures stale; empty when every figure is up to date and on its page."""
    problems, manifest = [], _manifest()
    for module in modules():
        rel = path_of(module).relative_to(REPO_ROOT).as_posix()
        if not path_of(module).is_file():
            problems.append(f"missing: {rel}")
        elif manifest.get(module.NAME) != stamp(module, module.data()):
            problems.append(f"stale: {rel} was drawn from another version of its code or data")
        page = BOOK_SRC / module.PAGE
        if page.is_file() and f"figures/{module.NAME}.png" not in page.read_text():
            problems.append(f"not shown: {module.PAGE} does not show figures/{module.NAME}.png")
    return problems
