"""Chapter 2 tests reuse chapter 0's tiny random-weight checkpoints (tests/ch00_model/tiny_models.py)."""

import sys
from pathlib import Path

CH00 = str(Path(__file__).resolve().parents[1] / "ch00_model")
if CH00 not in sys.path:
    sys.path.insert(0, CH00)
