"""Structured output end to end: every output the engine finishes is valid, bad patterns are refused at the door.

A tiny random model writes arbitrary text, so the constraint does all the
work; SmolLM2 shows it on a real model. Both get random schemas from
hypothesis, greedy and sampled, and jsonschema referees every output. The server takes OpenAI's
response_format and vLLM's structured_outputs / guided_* through the real
`openai` client.
"""

import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_json_schema import schemas

from miniyaie.engine import EngineConfig, InferenceEngine, InvalidRequestError
from miniyaie.structured import DEAD, compile_regex, schema_to_regex

FOUR_FIELDS = {"type": "object", "required": ["name", "age", "city", "member"], "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
    "city": {"type": "string", "enum": ["Paris", "Zürich", "東京"]}, "member": {"type": "boolean"}}}


@pytest.fixture(scope="module")
def tiny_chat(tmp_path_factory):
    from tiny_tokenizer import save_tiny_chat_model

    from miniyaie.model import load

    directory = tmp_path_factory.mktemp("tiny-chat-structured")
    save_tiny_chat_model(directory)
    return load(str(directory))


@pytest.fixture(scope="module")
def engine(tiny_chat):
    with InferenceEngine(tiny_chat, EngineConfig(block_size=4, num_blocks=512, max_num_batched_tokens=64)) as e:
        yield e


def check_finished_outputs(results, schema):
    finished = [r for r in results if r.finish_reason == "stop"]
    for r in finished:
        jsonschema.validate(json.loads(r.text), schema)
    dfa = compile_regex(schema_to_regex(schema))
    for r in results:
        if r.finish_reason == "length":  # cut by max_tokens: still the start of a valid text
            state = dfa.initial
            for byte in r.text.encode():
                state = int(dfa.next_state[state, byte])
                assert state != DEAD, f"{r.text!r} (cut by max_tokens) left the schema's language"
    return len(finished)


def wrapped(schema: dict) -> dict:
    """A bare number (or a string pattern) as the whole output could run on forever: put it in an object."""
    if schema.get("type") in ("integer", "number") or "pattern" in json.dumps(schema):
        return {"type": "object", "properties": {"v": schema}, "required": ["v"]}
    return schema


@pytest.mark.task("8.7")
@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schema=schemas.map(wrapped), temperature=st.sampled_from([0.0, 1.0]), seed=st.integers(0, 100))
def test_every_finished_output_validates_against_its_schema(engine, schema, temperature, seed):
    results = engine.generate(["Write JSON:", "Data:", "Answer in JSON."], max_tokens=110, json_schema=schema,
                              temperature=temperature, seed=seed, top_p=0.9, top_k=50, repetition_penalty=1.1)
    assert check_finished_outputs(results, schema) >= 1, f"no output finished its JSON in 110 tokens: {[r.text for r in results]}"
    assert engine.llm.num_request_blocks == 0


@pytest.fixture(scope="module")
def smollm2():
    with InferenceEngine("smollm2") as e:
        yield e


@pytest.mark.task("8.7")
@pytest.mark.bundled_model
def test_smollm2_writes_valid_json_for_a_four_field_schema(smollm2):
    prompts = [f"Describe person number {i} as JSON with name, age, city and membership." for i in range(4)]
    results = smollm2.generate(prompts, max_tokens=80, json_schema=FOUR_FIELDS)
    assert check_finished_outputs(results, FOUR_FIELDS) == 4, [r.text for r in results]
    assert smollm2.llm.counters["forced_tokens"] > 0


@pytest.mark.task("8.7")
@pytest.mark.bundled_model
@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schema=schemas.map(wrapped), temperature=st.sampled_from([0.0, 0.8]), seed=st.integers(0, 100))
def test_smollm2_writes_valid_json_for_random_schemas(smollm2, schema, temperature, seed):
    results = smollm2.generate([f"Fill in this JSON schema with an example: {json.dumps(schema)}", "Reply with JSON."],
                               max_tokens=120, json_schema=schema, temperature=temperature, seed=seed)
    assert check_finished_outputs(results, schema) >= 1, f"no output finished its JSON in 120 tokens: {[r.text for r in results]}"
    assert smollm2.llm.num_request_blocks == 0


@pytest.mark.task("8.7")
def test_regex_and_choice(engine):
    out = engine.generate("Give a code:", regex=r"[A-Z]{3}-[0-9]{2}", max_tokens=20)
    assert re.fullmatch(r"[A-Z]{3}-[0-9]{2}", out.text) and out.finish_reason == "stop"
    out = engine.generate("Pick:", choice=["red", "green", "blue"], max_tokens=20, temperature=1.0, seed=3)
    assert out.text in ("red", "green", "blue") and out.finish_reason == "stop"


@pytest.mark.task("8.7")
@pytest.mark.parametrize("kwargs,message", [
    (dict(regex="(ab"), "invalid regex"),
    (dict(json_schema={"type": "string", "format": "date"}), "'format'"),
    (dict(regex="a[^\\s\\S]"), "matches no string"),
    (dict(regex="a", choice=["a"]), "at most one"),
])
def test_bad_patterns_are_refused_at_the_door_and_lose_nothing(engine, kwargs, message):
    before = engine.get_stats()["kv_blocks"]["held_by_requests"]
    with pytest.raises(InvalidRequestError, match=re.escape(message)):
        engine.generate("x", max_tokens=5, **kwargs)
    assert engine.get_stats()["kv_blocks"]["held_by_requests"] == before == 0
    assert engine.generate("still serving", max_tokens=3, ignore_eos=True).token_ids


@pytest.fixture(scope="module")
def client(tiny_chat):
    import openai

    from miniyaie.api import ServerSettings, create_app
    from miniyaie.serving.server import BackgroundServer

    with InferenceEngine(tiny_chat, EngineConfig(block_size=4, num_blocks=256, max_num_batched_tokens=64)) as e:
        with BackgroundServer(create_app(e, ServerSettings(served_model_names=("tiny",)))) as server:
            yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.task("8.7")
def test_the_openai_client_gets_json_that_follows_response_format(client):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 8}, "sure": {"type": "boolean"}},
              "required": ["answer", "sure"]}
    reply = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)
    reply = client.completions.create(model="tiny", prompt="Say", max_tokens=10, extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    assert reply.choices[0].text in ("yes", "no")
    reply = client.completions.create(model="tiny", prompt="Code", max_tokens=10, extra_body={"guided_regex": "[0-9]{4}"})
    assert re.fullmatch("[0-9]{4}", reply.choices[0].text)


@pytest.mark.task("8.7")
@pytest.mark.parametrize("body,message", [
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 1}}}),
     "'minimum'"),
    (dict(extra_body={"guided_regex": "(ab"}), "invalid regex"),
    (dict(extra_body={"structured_outputs": {"regex": "a[^\\s\\S]"}}), "matches no string"),
    (dict(extra_body={"guided_json": "{not json"}), "not valid JSON"),
    (dict(extra_body={"guided_regex": "a", "guided_choice": ["a"]}), "one output format"),
    (dict(extra_body={"guided_regex": "a{1000000}"}), "repetition count 1000000 is over the limit of 1000"),
    (dict(extra_body={"guided_json": {"type": "array", "items": {"type": "integer"}, "maxItems": 10**29}}),
     "maxItems 100000000000000000000000000000 is over the limit of 256"),
    (dict(extra_body={"guided_json": {"type": "object", "properties": {"a": {"type": "string"}}, "required": 5}}),
     "required must be a list"),
    (dict(extra_body={"guided_json": {"type": "string", "pattern": "x)|(.*"}}), "invalid regex in pattern"),
])
def test_the_server_refuses_a_bad_schema_or_regex_with_a_400_that_says_why(client, body, message):
    import openai

    with pytest.raises(openai.BadRequestError, match=re.escape(message)):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5, **body)
    reply = client.completions.create(model="tiny", prompt="still there?", max_tokens=3, extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 3, "the server serves on after a refused request"


@pytest.mark.task("8.7")
def test_json_object_response_format_gives_a_json_object(client):
    reply = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=80, temperature=1.0, seed=1,
        response_format={"type": "json_object"})
    choice = reply.choices[0]
    if choice.finish_reason == "stop":
        assert isinstance(json.loads(choice.message.content), dict)
    else:  # cut by max_tokens: still the start of a JSON object (nested at most two levels)
        from miniyaie.structured import json_object_regex
        from miniyaie.structured.limits import Budget, Limits

        # the test's own compile of the shape (5 s of CPU on the course's host): no deadline a busy host could miss
        dfa, state = compile_regex(json_object_regex(), Budget(Limits(compile_seconds=600))), 0
        for byte in choice.message.content.encode():
            state = int(dfa.next_state[state, byte])
            assert state != DEAD, f"{choice.message.content!r} is not the start of a JSON object"


@pytest.mark.task("8.7")
def test_a_fault_in_one_requests_guide_fails_that_request_alone(engine, monkeypatch):
    """A guide that raises (a bug, say in a learner's Task 8.7) ends its own request, not the step's others."""
    import asyncio
    import time

    from miniyaie.engine import GenerationOutput, RequestFailedError
    from miniyaie.structured.guide import Guide

    pattern = r"[a-z]{5}7"
    index = engine.llm.constraints._indexes().get(pattern)  # compiled and cached: the request's guide uses it
    original = Guide.advance

    def advance(self, token_id):
        if self.index is index:
            raise RuntimeError("planted fault in a guide")
        return original(self, token_id)

    monkeypatch.setattr(Guide, "advance", advance)

    async def both():
        healthy = asyncio.ensure_future(engine.generate_async("healthy", max_tokens=60, ignore_eos=True))
        while engine.get_stats()["requests"]["running"] == 0:  # the healthy one is decoding: the faulty one joins its steps
            await asyncio.sleep(0.002)
        faulty = asyncio.ensure_future(engine.generate_async("faulty", regex=pattern, max_tokens=10))
        return await asyncio.gather(faulty, healthy, return_exceptions=True)

    failed_before = engine.get_stats()["requests"]["failed"]
    faulty, healthy = asyncio.run(asyncio.wait_for(both(), 60))
    assert isinstance(faulty, RequestFailedError) and "planted fault in a guide" in str(faulty), repr(faulty)
    assert isinstance(healthy, GenerationOutput) and len(healthy.token_ids) == 60, (
        f"the request beside the faulty one must finish normally, got {healthy!r}")
    deadline = time.monotonic() + 10
    while engine.get_stats()["kv_blocks"]["held_by_requests"] and time.monotonic() < deadline:
        time.sleep(0.02)
    stats = engine.get_stats()
    assert stats["kv_blocks"]["held_by_requests"] == 0, "the failed request's blocks did not come back"
    assert stats["requests"]["failed"] == failed_before + 1
    engine.check_health()  # the loop serves on
