import sys
from pathlib import Path

import pytest

path = str(Path(__file__).resolve().parents[1] / "ch00_model")
if path not in sys.path:
    sys.path.append(path)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny random Llama with a byte-level tokenizer and chat template: (directory, transformers model)."""
    from tiny_tokenizer import save_tiny_chat_model

    directory = tmp_path_factory.mktemp("tiny-llama-chat")
    return directory, save_tiny_chat_model(directory)


@pytest.fixture(scope="session")
def tiny_loaded(tiny_dir):
    """The tiny model loaded once (InferenceEngine accepts a LoadedModel; each test builds its own engine)."""
    from miniyaie.model import load

    return load(str(tiny_dir[0]))
