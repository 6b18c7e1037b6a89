import sys
from pathlib import Path

path = str(Path(__file__).resolve().parents[1] / "ch00_model")
if path not in sys.path:
    sys.path.append(path)
