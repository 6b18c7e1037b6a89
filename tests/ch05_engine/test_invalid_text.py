"""Text that is not valid Unicode is refused at the engine's door, with a reason, and loses nothing."""

import pytest

from miniyaie.engine import EngineConfig, InferenceEngine, InvalidRequestError

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks


def test_a_lone_surrogate_in_a_prompt_is_an_invalid_request(tiny_loaded):
    with InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=32)) as engine:
        with pytest.raises(InvalidRequestError, match="not valid Unicode"):
            engine.generate("a\ud800b", max_tokens=2)
        assert engine.generate("ab", max_tokens=2).completion_tokens == 2, "the engine still serves"
        assert engine.get_stats()["requests"]["in_flight"] == 0
