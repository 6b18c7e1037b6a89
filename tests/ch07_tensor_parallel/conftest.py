"""Chapter 7 fixtures: tiny random checkpoints whose heads and vocabulary exercise every split.

Ranks run as threads of the test process (miniyaie.distributed.ThreadRanks)
except in test_processes.py, which starts real gloo processes.
"""

import sys
from pathlib import Path

import pytest

path = str(Path(__file__).resolve().parents[1] / "ch00_model")
if path not in sys.path:
    sys.path.append(path)

# name -> (family, config overrides): 4 query heads with 1, 2 and 4 KV heads, a vocabulary
# (321) that no tensor-parallel size here divides, tied and untied embeddings, biases, qk-norm.
MODELS = {
    "llama-kv1": ("llama", dict(num_key_value_heads=1, vocab_size=321)),
    "qwen2-kv2": ("qwen2", dict(num_key_value_heads=2, vocab_size=321)),
    "qwen3-kv4": ("qwen3", dict(num_key_value_heads=4, vocab_size=321, intermediate_size=90)),
}


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """checkpoint(name) -> (directory, transformers model), each saved once per session."""
    from tiny_models import save_tiny_model

    saved = {}

    def checkpoint(name: str):
        if name not in saved:
            family, overrides = MODELS[name]
            directory = tmp_path_factory.mktemp(f"tiny-{name}")
            saved[name] = directory, save_tiny_model(family, directory, **overrides)
        return saved[name]

    return checkpoint
