"""The chapter pages' figures: drawn by code in miniyaie/course/figures/, up to date, on their pages.

Nothing is redrawn here: each figure's stamp (its code and its data) is
recomputed and compared with the one recorded when it was drawn, as the
notebook pages are checked against their notebooks.
"""

import json
import re
import types
from pathlib import Path

import pytest

from miniyaie.course import figures

pytestmark = pytest.mark.ungraded
SRC = Path(__file__).resolve().parents[2] / "book" / "src"


def test_every_figure_is_drawn_from_its_current_code_and_data_and_shown():
    assert figures.check() == [], "run `miniyaie course figures`"


def test_every_figure_is_a_png_on_a_chapter_page_with_a_caption():
    for module in figures.modules():
        assert figures.path_of(module).read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), module.NAME
        assert re.fullmatch(r"ch\d\d_[a-z0-9_]+\.md", module.PAGE), module.PAGE
        text = (SRC / module.PAGE).read_text()
        shown = re.search(rf"!\[([^\]]+)\]\(figures/{module.NAME}\.png\)\n\n\*([^*\n]+)\*", text)
        assert shown, f"{module.PAGE} should show figures/{module.NAME}.png with alt text and an italic caption under it"


def _fake(name: str, source: str, data: dict) -> types.ModuleType:
    module = types.ModuleType(f"fake_{name}")
    module.NAME, module.PAGE = name, "ch99_fake.md"
    module.data = lambda: data
    module.__source__ = source
    return module


def test_a_changed_source_or_data_makes_a_figure_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "FIGURES", tmp_path / "figures")
    monkeypatch.setattr(figures, "MANIFEST", tmp_path / "figures" / "chapter_figures.json")
    monkeypatch.setattr(figures, "BOOK_SRC", tmp_path)
    monkeypatch.setattr(figures, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(figures.inspect, "getsource", lambda m: getattr(m, "__source__", None) or "style v1")
    module = _fake("ch99_demo", "def draw(): v1", {"cells": [1, 2]})
    monkeypatch.setattr(figures, "modules", lambda: [module])
    assert figures.check() == ["missing: figures/ch99_demo.png"]
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "ch99_demo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    figures.MANIFEST.write_text(json.dumps({"ch99_demo": figures.stamp(module, module.data())}))
    (tmp_path / "ch99_fake.md").write_text("# Fake\n\n![demo](figures/ch99_demo.png)\n")
    assert figures.check() == []
    stale = ["stale: figures/ch99_demo.png was drawn from another version of its code or data"]
    module.__source__ = "def draw(): v2"  # the drawing code changed
    assert figures.check() == stale
    module.__source__ = "def draw(): v1"
    module.data = lambda: {"cells": [1, 3]}  # the component it draws from now behaves differently
    assert figures.check() == stale
    module.data = lambda: {"cells": [1, 2]}
    (tmp_path / "ch99_fake.md").write_text("# Fake\n")
    assert figures.check() == ["not shown: ch99_fake.md does not show figures/ch99_demo.png"]


def test_a_figure_that_draws_state_follows_its_component(monkeypatch):
    """The timeline is the real scheduler's: a scheduler that schedules differently changes the data, so the stamp."""
    from miniyaie.course.figures import ch01_batching_timeline as timeline

    before = timeline.data()
    assert {kind for _, _, kind, _ in before["cells"]} == {"prefill", "decode"}
    assert max(n for _, _, kind, n in before["cells"] if kind == "prefill") <= timeline.BUDGET
    monkeypatch.setattr(timeline, "BUDGET", timeline.BUDGET // 2)
    after = timeline.data()
    assert after["cells"] != before["cells"]
    assert figures.stamp(timeline, after) != figures.stamp(timeline, before)
