"""Chapter 2 tests reuse chapter 0's tiny random-weight checkpoints (tests/ch00_model/tiny_models.py).

The end-to-end generation test runs after the chapter's unit tests: under -x a mistake stops at the unit test
that names it, not at a token diff."""

import sys
from pathlib import Path

CH00 = str(Path(__file__).resolve().parents[1] / "ch00_model")
if CH00 not in sys.path:
    sys.path.insert(0, CH00)

HERE = Path(__file__).resolve().parent
END_TO_END = HERE / "test_paged_generate.py"


def pytest_collection_modifyitems(config, items):
    """Move this folder's end-to-end tests after its last other test; every other test keeps its place."""
    ours = [i for i, item in enumerate(items) if Path(item.path).resolve().parent == HERE]
    last = [item for item in items if Path(item.path).resolve() == END_TO_END]
    if not ours or not last:
        return
    end = ours[-1]
    before = [item for item in items[: end + 1] if Path(item.path).resolve() != END_TO_END]
    items[:] = before + last + items[end + 1 :]
