"""Chapter 6 fixtures: a tiny random Llama behind a live loopback server (one per module).

Nothing downloads and nothing leaves 127.0.0.1. The oracle is transformers'
greedy generate on the same tiny model.
"""

import sys
from pathlib import Path

import pytest

for folder in ("ch00_model", "ch05_engine"):
    path = str(Path(__file__).resolve().parents[1] / folder)
    if path not in sys.path:
        sys.path.append(path)

from server_helpers import MODEL, start_server  # noqa: E402,F401


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny random Llama with a byte-level tokenizer and chat template: (directory, transformers model)."""
    from tiny_tokenizer import save_tiny_chat_model

    directory = tmp_path_factory.mktemp("tiny-llama-chat")
    return directory, save_tiny_chat_model(directory)


@pytest.fixture(scope="session")
def tiny_loaded(tiny_dir):
    from miniyaie.model import load

    return load(str(tiny_dir[0]))


@pytest.fixture(scope="module")
def served(tiny_loaded):
    """(engine, server) for the module."""
    engine, server = start_server(tiny_loaded)
    yield engine, server
    server.__exit__(None, None, None)
    engine.close()


@pytest.fixture(scope="module")
def client(served):
    import openai

    return openai.OpenAI(base_url=f"{served[1].url}/v1", api_key="unused", max_retries=0, timeout=120)
