"""Every notebook runs headless from top to bottom and draws its figures.

It runs through the same code as `miniyaie course notebooks`, which renders
the book's notebook pages, so what is tested is what the book shows.
"""

import psutil
import pytest

from miniyaie.course import notebooks

pytestmark = pytest.mark.ungraded


def running_kernels() -> list[psutil.Process]:
    """This process's Jupyter kernels that are still running."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "ipykernel_launcher" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:  # it ended between the listing and the look: not running
            continue
    return found


@pytest.mark.parametrize("path", notebooks.sources(), ids=lambda p: p.stem)
def test_notebook_runs_and_draws(path):
    executed = notebooks.execute(path)
    assert not running_kernels(), "the notebook's kernel should stop when its run ends"
    figures = notebooks.images(executed)
    assert figures, f"{path.name} drew no figure"
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in figures)
    page, written = notebooks.render(path, executed)
    assert len(written) == len(figures) and page.count("](figures/") == len(figures)


def test_there_are_notebooks():
    assert notebooks.sources()
