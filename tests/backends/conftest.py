"""Tests of the provided backends (miniyaie/backends/): ungraded, they build the same tiny models as the chapters."""

import sys
from pathlib import Path

for folder in ("ch00_model", "ch05_engine"):  # tiny_models.py, tiny_tokenizer.py
    path = str(Path(__file__).resolve().parents[1] / folder)
    if path not in sys.path:
        sys.path.append(path)
