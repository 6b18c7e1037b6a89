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

MODEL = "tiny"


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny random Llama with a byte-level tokenizer and chat template: (directory, transformers model)."""
    from tiny_models import save_tiny_model
    from tiny_tokenizer import save_tiny_tokenizer

    directory = tmp_path_factory.mktemp("tiny-llama-chat")
    hf_model = save_tiny_model("llama", directory)
    tokenizer = save_tiny_tokenizer(directory)
    (directory / "generation_config.json").write_text('{"eos_token_id": %d}' % tokenizer.eos_token_id)
    return directory, hf_model


@pytest.fixture(scope="session")
def tiny_loaded(tiny_dir):
    from miniyaie.model import load

    return load(str(tiny_dir[0]))


def start_server(loaded, num_blocks=256, adapters=(), **settings):
    """(engine, BackgroundServer) serving the tiny model as MODEL; the caller closes both."""
    from miniyaie.api import ServerSettings, create_app
    from miniyaie.api.server import BackgroundServer
    from miniyaie.engine import EngineConfig, InferenceEngine

    engine = InferenceEngine(loaded, EngineConfig(block_size=4, num_blocks=num_blocks, max_num_batched_tokens=64),
                             adapters=adapters)
    server = BackgroundServer(create_app(engine, ServerSettings(served_model_names=(MODEL,), **settings)))
    return engine, server.__enter__()


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


def wait_until_idle(engine, timeout=20.0):
    """Poll the engine's public stats until no request holds blocks; the stats then."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        stats = engine.get_stats()
        idle = stats["requests"]["in_flight"] == stats["requests"]["running"] == stats["requests"]["waiting"] == 0
        if idle and stats["kv_blocks"]["held_by_requests"] == 0:
            return stats
        assert time.monotonic() < deadline, f"the engine did not become idle: {stats}"
        time.sleep(0.02)
