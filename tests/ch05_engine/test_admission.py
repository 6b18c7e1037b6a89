"""Task 5.10: at the door — admit a request whole or refuse it with nothing changed; abort ends a request's family.

No test here runs an engine step (that is Task 5.11): what admission did is
read from the scheduler (chapter 1), the paged memory and the counters.
"""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tiny_models import save_tiny_model

from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.engine.errors import InvalidRequestError, PromptTooLongRequestError, ResourceExhaustedError
from miniyaie.engine.sampling_params import SamplingParams

CONTEXT, VOCAB = 128, 320  # the tiny model's
BLOCK, BLOCKS = 4, 48  # a pool of 192 tokens: more than the context, so capping max_tokens decides some admissions


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-admission")
    save_tiny_model("llama", path)
    from miniyaie.model import load_model

    return load_model(path)


def engine_for(model) -> LLMEngine:
    return LLMEngine(model, EngineConfig(block_size=BLOCK, num_blocks=BLOCKS, enable_prefix_caching=False))


def queued(engine: LLMEngine) -> set[str]:
    return set(engine.scheduler.requests)


BAD = [
    pytest.param([], {}, InvalidRequestError, "empty", id="empty"),
    pytest.param([1] * CONTEXT, {}, PromptTooLongRequestError, f"{CONTEXT}", id="as-long-as-the-context"),
    pytest.param([1, VOCAB], {}, InvalidRequestError, f"{VOCAB}", id="id-past-the-vocabulary"),
    pytest.param([1, -1], {}, InvalidRequestError, None, id="negative-id"),
    pytest.param([1, True], {}, InvalidRequestError, None, id="bool-id"),
    pytest.param([1, 2.0], {}, InvalidRequestError, None, id="float-id"),
    pytest.param([1] * 10, dict(n=2, max_tokens=100), ResourceExhaustedError, "192", id="worst-case-past-the-pool"),
]


@pytest.mark.task("5.10")
@pytest.mark.parametrize("prompt, params, error, words", BAD)
def test_a_refused_request_changes_nothing(tiny_model, prompt, params, error, words):
    engine = engine_for(tiny_model)
    engine.add_request([5, 6, 7], SamplingParams(max_tokens=4), request_id="earlier")
    with pytest.raises(error, match=words) as refused:
        engine.add_request(prompt, SamplingParams(**params), request_id="r")
    assert str(refused.value), "a refusal says why"
    assert queued(engine) == {"earlier"}, f"a refused request left {queued(engine) - {'earlier'}} in the scheduler"
    assert engine.counters["prompt_tokens"] == 3, "a refused request's prompt was counted"
    assert engine.add_request([1, 2], SamplingParams(max_tokens=4), request_id="r") == "r", "the refused id must stay free"


@pytest.mark.task("5.10")
def test_the_first_and_the_last_id_of_the_vocabulary_are_admitted(tiny_model):
    engine = engine_for(tiny_model)
    rid = engine.add_request([0, VOCAB - 1, 0], SamplingParams(max_tokens=2))
    assert engine.scheduler.requests[rid].prompt_token_ids == [0, VOCAB - 1, 0]


@pytest.mark.task("5.10")
def test_a_prompt_one_token_shorter_than_the_context_is_admitted_for_one_token(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=BLOCK, num_blocks=64, enable_prefix_caching=False))
    rid = engine.add_request([1] * (CONTEXT - 1), SamplingParams(max_tokens=50))
    assert engine.scheduler.requests[rid].max_tokens == 1


@pytest.mark.task("5.10")
@settings(max_examples=60, deadline=None)
@given(length=st.integers(1, CONTEXT - 1), n=st.integers(1, 4), max_tokens=st.integers(1, 300))
@example(length=4, n=2, max_tokens=94)  # needs exactly the pool's 192 tokens: admitted
@example(length=5, n=2, max_tokens=94)  # one token more: refused
@example(length=100, n=1, max_tokens=1000)  # the context caps max_tokens to 28 first: 128 <= 192, admitted
@example(length=64, n=2, max_tokens=300)  # capped to 64 each: 192, admitted
@example(length=63, n=2, max_tokens=300)  # capped to 65 each: 193, refused
def test_the_worst_case_that_must_fit_is_the_prompt_plus_n_capped_outputs(tiny_model, length, n, max_tokens):
    engine = engine_for(tiny_model)
    capped = min(max_tokens, CONTEXT - length)
    needed = length + n * capped
    params = SamplingParams(n=n, max_tokens=max_tokens)
    if needed <= BLOCK * BLOCKS:
        rid = engine.add_request([7] * length, params)
        assert engine.scheduler.requests[rid].max_tokens == capped, (
            f"max_tokens {max_tokens} with a {length}-token prompt and a {CONTEXT}-token context must become {capped}"
        )
    else:
        with pytest.raises(ResourceExhaustedError):
            engine.add_request([7] * length, params)
        assert not queued(engine)


@pytest.mark.task("5.10")
def test_the_ids_of_a_requests_completions_are_in_use_until_it_ends(tiny_model):
    engine = engine_for(tiny_model)
    engine.add_request([1, 2], SamplingParams(n=3, max_tokens=2), request_id="a")
    for taken in ("a", "a#1", "a#2"):
        with pytest.raises(InvalidRequestError, match="already in use"):
            engine.add_request([3], SamplingParams(max_tokens=2), request_id=taken)
    assert engine.add_request([3], SamplingParams(max_tokens=2), request_id="a#3") == "a#3", "a has 3 completions, not 4"
    with pytest.raises(InvalidRequestError, match="already in use"):
        engine.add_request([3], SamplingParams(n=2, max_tokens=2), request_id="a#3")  # its completion a#3#1 is free, a#3 is not
    engine.add_request([4], SamplingParams(max_tokens=2), request_id="b#1")
    with pytest.raises(InvalidRequestError, match="already in use"):
        engine.add_request([4], SamplingParams(n=2, max_tokens=2), request_id="b")  # its completion b#1 is taken
    assert queued(engine) == {"a", "a#3", "b#1"}, "a request refused for one of its completions' ids was queued anyway"
    assert engine.counters["prompt_tokens"] == 2 + 1 + 1


@pytest.mark.task("5.10")
def test_requests_without_an_id_get_distinct_ones(tiny_model):
    engine = engine_for(tiny_model)
    ids = [engine.add_request([1, 2, 3], SamplingParams(max_tokens=2)) for _ in range(5)]
    assert len(set(ids)) == 5 and set(ids) == queued(engine)


@pytest.mark.task("5.10")
def test_abort_ends_a_waiting_or_running_request_and_frees_its_blocks(tiny_model):
    engine = engine_for(tiny_model)
    engine.add_request(list(range(1, 11)), SamplingParams(max_tokens=4), request_id="running")
    engine.add_request([1, 2], SamplingParams(max_tokens=4), request_id="waiting")
    engine.scheduler.schedule()  # admits both: their blocks are allocated
    assert engine.memory.num_used_blocks > 0
    assert not engine.abort("no-such-request")
    assert engine.abort("running") and engine.abort("waiting")
    assert not engine.abort("running"), "a request aborted once is no longer known"
    assert engine.memory.num_used_blocks == 0, f"{engine.memory.num_used_blocks} blocks still held after both aborts"
    assert not engine.has_unfinished()
    assert engine.add_request([9], SamplingParams(max_tokens=2), request_id="running") == "running", "an aborted id is free"


@pytest.mark.task("5.10")
def test_abort_ends_a_whole_family_and_nothing_else(tiny_model):
    engine = engine_for(tiny_model)
    engine.add_request([1, 2], SamplingParams(n=3, max_tokens=2), request_id="x")
    for other in ("x2", "xy", "y"):
        engine.add_request([3], SamplingParams(max_tokens=2), request_id=other)
    assert engine.abort("x")
    assert queued(engine) == {"x2", "xy", "y"}, f"aborting x ended {({'x2', 'xy', 'y'} - queued(engine)) or 'nothing else'}"
    for freed in ("x#1", "x#2", "x"):
        assert engine.add_request([4], SamplingParams(max_tokens=2), request_id=freed) == freed, (
            f"{freed!r} is still 'in use' after its request was aborted: forget every completion of the family"
        )


@pytest.mark.task("5.10")
def test_a_completion_aborted_before_it_is_forked_is_ended_and_its_id_freed(tiny_model):
    engine = engine_for(tiny_model)
    engine.add_request([1, 2], SamplingParams(n=3, max_tokens=2), request_id="g")
    assert engine.abort("g#1"), "g#1 is live though not forked yet (the scheduler does not run it): abort ends it, True"
    assert not engine.abort("g#1"), "a completion aborted once is no longer known"
    assert queued(engine) == {"g"}
    assert engine.add_request([3], SamplingParams(max_tokens=2), request_id="g#1") == "g#1", "an aborted id is free"
    assert engine.abort("g") and queued(engine) == {"g#1"}, "aborting g ended the new request that took the id g#1"
    for freed in ("g", "g#2"):  # g's family lost g#1 and then ended: all of it is free
        assert engine.add_request([5], SamplingParams(max_tokens=1), request_id=freed) == freed, (
            f"{freed!r} is still 'in use' after its request was aborted (a family must go with its last member, "
            "and lose only the member forgotten)")
