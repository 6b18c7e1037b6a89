"""Chapter 11's shared setup: one tiny Llama and its peft adapters, made once per session (about 10 s)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lora_models import ADAPTERS, peft_merged, save_peft_adapter, save_tiny_llama  # noqa: E402


class Setup:
    """The base model's folder, its transformers model, each adapter's folder, peft's merged models (made on demand)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.base_dir = folder / "base"
        self.base = save_tiny_llama(self.base_dir)
        self.adapters = {}
        for seed, (name, settings) in enumerate(ADAPTERS.items()):
            self.adapters[name] = folder / name
            save_peft_adapter(self.base, self.adapters[name], seed + 1, **settings)
        self._merged = {}

    def merged(self, name: str):
        if name not in self._merged:
            self._merged[name] = peft_merged(self.base, self.adapters[name])
        return self._merged[name]

    @property
    def config(self):
        from miniyaie.model.loader import read_config

        return read_config(self.base_dir)


@pytest.fixture(scope="session")
def lora_setup(tmp_path_factory) -> Setup:
    return Setup(tmp_path_factory.mktemp("lora"))
