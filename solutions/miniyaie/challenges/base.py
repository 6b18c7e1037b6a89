"""A chapter's challenge: one open design problem, a fixed workload, and a number.

The contract (one module per chapter, `miniyaie/challenges/chNN_<topic>.py`,
exposing `CHALLENGE = Challenge(...)`):

- `run()` scores the *selected* tree: it is called in a child process whose
  MINIYAIE_IMPL selects the learner's code ("yours") and imports chapter
  code only through `miniyaie.<package>`, so one process imports one tree.
- `reference()` (optional) scores the reference's design; it is called in a
  child process with MINIYAIE_IMPL=solutions. When it is None the reference
  column is `run()` on the reference tree.
- `baseline()` (optional) scores a simple design (also called with the
  reference tree selected): what there is to beat.
- `correctness_tests`: pytest paths or node ids (relative to the repository)
  that must pass on the selected tree before a score counts. No test asserts
  a score.
- A score is a plain float. Where it is not a timing it is deterministic
  (hit rates, counts, simulated time from a cost model): the same on every
  machine. `float("nan")` means "not measurable here" (a kernel's time on a
  machine without a GPU); say why in `note`.
- The learner's design: where the chapter's own code is not the lever (its
  tests pin the behaviour), the learner writes an optional module
  `miniyaie/<package>/challenge.py` in their tree (chapters/; `course sync`
  leaves it alone) and `learner_design()` picks what it defines, else the
  default (the chapter's plain behaviour, usually the baseline's).
- A workload runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miniyaie._switch import CHAPTER_PACKAGES


@dataclass(frozen=True)
class Challenge:
    number: int  # the chapter
    title: str  # the problem, in a few words
    metric: str  # what the score is ("p99 time to first token")
    unit: str  # "ms (simulated)", "%", "steps"
    higher_is_better: bool
    workload: str  # one sentence: the fixed, seeded workload
    run: Callable[[], float]  # the selected tree's score (child process, learner's tree selected)
    baseline: Callable[[], float] | None  # a simple design's score (reference tree selected)
    correctness_tests: list[str]  # must pass on the selected tree for a score to count
    reference: Callable[[], float] | None = None  # the reference design's score; None: run() on the reference
    note: str = ""  # printed under the table (e.g. "timed only on a GPU")
    explain: Callable[[float], str] | None = None  # called after run() with its score, in that process: a line about it
    learner_may_import: tuple[str, ...] = ()  # names of the harness a design may import (a base class the page names)
    extra: dict[str, Any] = field(default_factory=dict)  # anything a chapter wants to carry (unused by the runner)

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"


def _modules() -> dict[int, str]:
    """Chapter number -> module name, for every `chNN_*` module of this package."""
    import miniyaie.challenges as pkg

    found: dict[int, str] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        name = info.name
        if len(name) > 4 and name.startswith("ch") and name[2:4].isdigit() and name[4] == "_":
            found[int(name[2:4])] = f"miniyaie.challenges.{name}"
    return found


def chapters_with_challenges() -> list[int]:
    return sorted(_modules())


def challenge_for(number: int) -> Challenge:
    """The challenge of chapter `number` (ValueError when it has none)."""
    modules = _modules()
    if number not in modules:
        have = ", ".join(map(str, sorted(modules))) or "none"
        raise ValueError(f"chapter {number} has no challenge yet; chapters with one: {have}")
    challenge = importlib.import_module(modules[number]).CHALLENGE
    if challenge.number != number:
        raise ValueError(f"{modules[number]} declares chapter {challenge.number}, not {number}")
    return challenge


def reads_the_workload(source: str, allowed: tuple[str, ...] = ()) -> str | None:
    """Why a design's source reads the challenges package (where the scored workloads are made), or None.

    Importing one of `allowed` from it is fine (a base class the page names); anything else, or the package
    named in a string (importlib), is not."""
    import ast

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name.startswith("miniyaie.challenges") for a in node.names):
            return "imports miniyaie.challenges"
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("miniyaie.challenges"):
            extra = sorted({a.name for a in node.names} - set(allowed))
            if extra:
                return f"imports {', '.join(extra)} from {node.module}"
        if isinstance(node, ast.ImportFrom) and node.module == "miniyaie" and any(a.name == "challenges" for a in node.names):
            return "imports miniyaie.challenges"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "miniyaie.challenges" in node.value:
            return "names miniyaie.challenges in a string"
    return None


def learner_design(number: int, name: str, default: Any) -> Any:
    """`name` from the selected tree's `miniyaie/<package>/challenge.py` if it defines it, else `default`.

    ValueError, before that module runs, when it reads the challenges package beyond the names the chapter's
    challenge allows: the harness makes the workload a design is scored on, and a design that reads the trace
    it is scored on measures the trace, not the design."""
    module_name = f"miniyaie.{CHAPTER_PACKAGES[number]}.challenge"
    try:
        spec = importlib.util.find_spec(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name.rsplit(".", 1)[0]:  # the package itself is missing: say so
            raise
        spec = None
    if spec is None:
        return default
    if spec.origin and (why := reads_the_workload(Path(spec.origin).read_text(), challenge_for(number).learner_may_import)):
        raise ValueError(f"{spec.origin} {why}: a design may not read the workload it is scored on; "
                         "decide from what the engine sees as it runs")
    return getattr(importlib.import_module(module_name), name, default)
