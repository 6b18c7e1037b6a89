"""Counters a user reads (get_stats, usage.cached_tokens) mean what they say after preemption and stop strings."""

import pytest
from tiny_models import save_tiny_model

from miniyaie.engine import EngineConfig, InferenceEngine
from miniyaie.model import load_model

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-counters")
    save_tiny_model("llama", path)
    return load_model(path)


def test_requests_ended_by_a_stop_string_count_as_finished(tiny_model, tiny_loaded):
    with InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=64)) as engine:
        free = engine.generate("hello", max_tokens=12, ignore_eos=True)
        assert len(free.text) >= 4, "the tiny model should produce a few characters"
        stop = free.text[2:4]
        stopped = engine.generate("hello", max_tokens=12, ignore_eos=True, stop=[stop])
        assert stopped.finish_reason == "stop"
        stats = engine.get_stats()
        assert stats["requests"]["finished"] == 2, f"finished {stats['requests']['finished']}, expected both requests"
        assert stats["requests"]["in_flight"] == 0 and stats["kv_blocks"]["held_by_requests"] == 0
