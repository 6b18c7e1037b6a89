"""Helpers of the chapter 6 tests (a module with a unique name: every test folder has a conftest)."""

MODEL = "tiny"


def start_server(loaded, num_blocks=256, adapters=(), **settings):
    """(engine, BackgroundServer) serving the tiny model as MODEL; the caller closes both."""
    from miniyaie.api import ServerSettings, create_app
    from miniyaie.serving.server import BackgroundServer
    from miniyaie.engine import EngineConfig, InferenceEngine

    engine = InferenceEngine(loaded, EngineConfig(block_size=4, num_blocks=num_blocks, max_num_batched_tokens=64),
                             adapters=adapters)
    server = BackgroundServer(create_app(engine, ServerSettings(served_model_names=(MODEL,), **settings)))
    return engine, server.__enter__()


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
