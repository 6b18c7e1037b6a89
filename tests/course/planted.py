"""The planted-mistake tests' one helper: import a planted copy of a reference module under its own name."""

import importlib.util
import sys
from pathlib import Path


def import_planted(path: Path, name: str):
    """The module at `path`, imported as `name` (registered in sys.modules, so the test module's imports find it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
