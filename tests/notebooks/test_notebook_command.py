"""`miniyaie notebook`: a learner runs a notebook on their own chapter and gets it back, executed.

End to end through the real command (a subprocess, as a learner types it)
on a two-cell notebook made here, so that each run costs a kernel start,
not a model load.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from miniyaie._switch import CHAPTER_PACKAGES
from miniyaie.course import notebooks

pytestmark = pytest.mark.ungraded

TINY = '''# A tiny notebook of chapter 1

```python
import os

import matplotlib.pyplot as plt

import miniyaie.scheduler
from miniyaie.scheduler import Request, Scheduler, SchedulerConfig, TokenCountingMemory

print("selected:", os.environ.get("MINIYAIE_IMPL"), "| scheduler from:", miniyaie.scheduler.__file__)
scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=2), TokenCountingMemory(64))
scheduler.add_request(Request("r0", [1, 2, 3], 2))
out = scheduler.schedule()
print("scheduled tokens:", out.num_batched_tokens)
```

```python
plt.plot([0, 1], [0, out.num_batched_tokens])
plt.show()
```
'''


def miniyaie(*args, cwd):
    run = subprocess.run([sys.executable, "-m", "miniyaie", *map(str, args)], cwd=cwd, capture_output=True,
                         text=True, timeout=600)
    return run.returncode, run.stdout, run.stderr


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "01_tiny.md"  # numbered: chapter 1's notebook
    path.write_text(TINY)
    return path


def test_an_unfinished_chapter_is_named_not_dumped(tiny, tmp_path):
    status, out, err = miniyaie("notebook", tiny, "--out", tmp_path / "run", cwd=tmp_path)
    assert status == 1, out + err
    assert "MINIYAIE_IMPL=scheduler=chapters" in out  # the default: the notebook's chapter from chapters/
    assert "your chapter 1 is not finished (Task 1." in out
    assert "NotImplementedError: Chapter 1, Task" in out
    assert "code cell 1 of 2" in out
    assert "Traceback" not in out + err and len(out.splitlines()) <= 8, out + err
    saved = tmp_path / "run" / "01_tiny.ipynb"  # the cells that ran, to read the full error
    assert saved.is_file() and "run/01_tiny.ipynb" in out
    assert not list((tmp_path / "run").glob("*.png"))


def test_the_reference_run_writes_the_notebook_and_figures_where_it_says(tiny, tmp_path):
    status, out, err = miniyaie("notebook", tiny, "--impl", "solutions", "--out", "run", cwd=tmp_path)
    assert status == 0, out + err
    shown = [tmp_path / line.strip() for line in out.splitlines() if line.startswith("  ")]
    assert sorted(shown) == sorted((tmp_path / "run").iterdir())
    assert [p.name for p in shown] == ["01_tiny.ipynb", "01_tiny-1.png"]
    assert shown[1].read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    executed = json.loads(shown[0].read_text())
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    assert "selected: solutions" in printed and "/solutions/miniyaie/scheduler/" in printed
    assert "scheduled tokens: 3" in printed


@pytest.mark.parametrize("args", [
    ["99"],  # no such notebook
    ["01", "--impl", "nonsense=chapters"],
    ["01", "--out", str(notebooks.BOOK_SRC / "runs")],  # the book shows the reference only
])
def test_bad_arguments_are_one_line_and_run_nothing(args, tmp_path):
    status, out, err = miniyaie("notebook", *args, cwd=tmp_path)
    assert status == 2 and err.startswith("miniyaie: error:") and len(err.splitlines()) == 1, out + err
    assert not out and not (notebooks.BOOK_SRC / "runs").exists()


def test_each_notebook_defaults_to_its_own_chapter():
    for source in notebooks.sources():
        assert notebooks.learner_impl(source) == f"{CHAPTER_PACKAGES[int(source.name[:2])]}=chapters"


def test_every_page_tells_how_to_run_it_on_your_code():
    for source in notebooks.sources():
        page = notebooks.page_of(source).read_text()
        assert f"`miniyaie notebook {source.name[:2]}`" in page and "jupytext --to ipynb --execute" not in page
