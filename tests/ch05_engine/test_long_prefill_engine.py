"""The engine's scheduler bounds long prefills (chapter 1's LongPrefillBound), on by default and visible in its stats."""

import pytest
from tiny_models import save_tiny_model

from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.engine.sampling_params import SamplingParams

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-long-prefill")
    save_tiny_model("llama", path)
    from miniyaie.model import load_model

    return load_model(path)


@pytest.mark.ungraded
def test_the_engine_bounds_long_prefills_by_default(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=64))
    config = engine.scheduler.config
    assert (config.long_prefill_token_threshold, config.max_long_partial_prefills) == (256, 1), (
        "EngineConfig's long-prefill bound must reach the scheduler"
    )


@pytest.mark.parametrize("threshold", [0, 8])
def test_a_short_request_behind_a_long_prompt_gets_its_first_token_at_once(tiny_model, threshold):
    config = EngineConfig(block_size=4, num_blocks=64, max_num_batched_tokens=16, long_prefill_token_threshold=threshold)
    engine = LLMEngine(tiny_model, config)
    engine.add_request([(7 * i) % 300 + 1 for i in range(100)], SamplingParams(max_tokens=2, ignore_eos=True), request_id="long")
    engine.step()
    engine.add_request([5, 6, 7], SamplingParams(max_tokens=2, ignore_eos=True), request_id="short")
    first_token_step = None
    for step in range(1, 20):
        if any(event.request_id == "short" for event in engine.step()):
            first_token_step = step
            break
    if threshold:
        assert first_token_step == 1, "with the bound on, the short request is admitted and sampled in the next step"
        assert engine.stats["num_long_prefills_held"] >= 1, "the counter shows the long prefill held back"
    else:
        assert first_token_step > 1, "without the bound the long prefill takes every step's whole budget first"
        assert engine.stats["num_long_prefills_held"] == 0
