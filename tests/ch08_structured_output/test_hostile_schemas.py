"""Any schema a client sends: refused by a PatternError naming its keyword, or every output parses and validates.

Hypothesis sends schemas (string patterns included) and broken copies of them (a keyword given a
wrong value) to an engine with a tiny random model, which writes arbitrary text: the constraint does
all the work, and `jsonschema` referees each finished output. Never another exception. The explicit
examples are the mistakes and the escapes the limits exist for (chapter 8's "Limits").
"""

import json
import math
import re

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_json_schema import schemas
from test_structured_engine import check_finished_outputs, client, engine, tiny_chat  # noqa: F401 - fixtures

from miniyaie.structured import PatternError
from miniyaie.structured.json_schema import KNOWN

PATTERNS = ["[a-z]{2}[0-9]", "x)|(.*", 'a"b', "a\\tb", "a\tb", "\\d+\\.\\w?", "[^a]{1,3}", ".{2}", "a(?=b)", "(?<=a)b",
            '[a-z]{2}", "evil": "1', "(a|é)*z", "\\\\", "[\\x00-\\x7f]{1,2}", "^ab$", "a{1000000}", "(ab", "\\1(a)"]
JUNK = [5, -1, 2**70, [], {}, None, "x", True, 1e400, math.nan, "\ud800", [{}], ["nope"]]


def with_pattern(schema):
    return st.sampled_from(PATTERNS).map(lambda p: {"type": "object", "properties": {"s": {"type": "string", "pattern": p}},
                                                    "required": ["s"]})


def broken(schema):
    """The schema with one keyword (at the top or in a member) given a value of the wrong kind or size."""
    keywords = st.sampled_from(sorted(KNOWN - {"title", "description", "$schema", "$id", "examples", "default", "$comment"}))
    return st.tuples(keywords, st.sampled_from(JUNK)).map(lambda kv: {**schema, kv[0]: kv[1]})


any_schema = st.one_of(schemas, schemas.flatmap(with_pattern), schemas.flatmap(broken))


def keywords_in(value) -> set[str]:
    """The schema keywords used anywhere in value (without recursion: some examples nest 800 deep)."""
    found, todo = set(), [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            found |= {k for k in item if k in KNOWN}
            todo += item.values()
        elif isinstance(item, list):
            todo += item
    return found


def nested_types(depth: int):
    kind = "string"
    for _ in range(depth):
        kind = [kind]
    return {"type": kind}


def nested_any_of(depth: int):
    schema = {"type": "string"}
    for _ in range(depth):
        schema = {"anyOf": [schema]}
    return schema


@pytest.mark.task("8.7")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schema=any_schema)
@example(schema={"type": "object", "properties": {"a": {"type": "string"}}, "required": 5})
@example(schema={"type": "object", "properties": []})
@example(schema={"enum": 5})
@example(schema={"anyOf": 5})
@example(schema={"type": [{}]})
@example(schema={"type": "string", "pattern": 5})
@example(schema={"type": "string", "pattern": None})
@example(schema={"enum": ["ok", "\ud800"]})
@example(schema={"const": "a\udfff"})
@example(schema={"type": "object", "properties": {"\ud800": {"type": "string"}}})
@example(schema={"type": "string", "pattern": "a\ud800"})
@example(schema={"enum": []})
@example(schema={"anyOf": []})
@example(schema={"type": []})
@example(schema={"enum": [1e400]})
@example(schema={"const": math.nan})
@example(schema={"type": "object", "properties": {"v": {"enum": [1, math.inf]}}})
@example(schema={"type": "string", "pattern": "x)|(.*"})
@example(schema={"type": "string", "pattern": 'a"b'})
@example(schema={"type": "string", "pattern": "a\\tb"})
@example(schema={"type": "object", "properties": {"k": {"type": "string", "pattern": '[a-z]{2}", "evil": "1'}},
                 "required": ["k"]})
@example(schema={"type": "string", "pattern": "a(?=b)"})
@example(schema={"type": "string", "pattern": "(?<=a)b"})
@example(schema={"type": "string", "enum": [1, "a"]})
@example(schema={"type": "object", "properties": {"s": {"type": "string", "pattern": "[^a]{1,3}"}}, "required": ["s"]})
@example(schema={"type": "object", "properties": {"s": {"type": "string", "pattern": ".{2}"}}, "required": ["s"]})
def test_every_schema_is_refused_by_keyword_or_all_its_outputs_validate(engine, schema):  # noqa: F811
    try:
        results = engine.generate(["Write JSON:", "Data:"], max_tokens=40, json_schema=schema, temperature=1.0, seed=0)
    except PatternError as exc:
        named = keywords_in(schema) | {"json_schema"}
        assert any(re.search(rf"\b{re.escape(k)}\b", str(exc)) for k in named), (
            f"the refusal must name one of the schema's keywords {sorted(named)}: {exc}")
        assert engine.llm.num_request_blocks == 0
        return
    check_finished_outputs(results, json.loads(json.dumps(schema)))  # each finished one parses and validates
    assert engine.llm.num_request_blocks == 0


@pytest.mark.task("8.7")
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schema=any_schema)
@example(schema={"enum": ["ok", "\ud800"]})  # a lone surrogate, sent as JSON's \ud800 escape (the openai client cannot)
@example(schema={"const": math.nan})  # NaN in the body: Python's JSON reader accepts it
@example(schema={"type": [{}]})
@example(schema={"type": "object", "properties": {"k": {"type": "string", "pattern": '[a-z]{2}", "evil": "1'}},
                 "required": ["k"]})
def test_through_the_server_every_schema_is_a_400_naming_its_keyword_or_outputs_that_validate(client, schema):  # noqa: F811
    body = {"model": "tiny", "prompt": ["Write JSON:", "Data:"], "max_tokens": 40, "temperature": 1.0, "seed": 0,
            "guided_json": schema}
    reply = httpx.post(f"{client.base_url}completions", content=json.dumps(body),
                       headers={"content-type": "application/json"}, timeout=120)
    assert reply.status_code in (200, 400), (
        f"every schema gets a 400 naming its keyword or outputs that validate; the server answered "
        f"{reply.status_code}: {reply.text[:300]}")
    if reply.status_code == 400:
        message = reply.json()["error"]["message"]
        named = keywords_in(schema) | {"json_schema", "guided_json"}
        assert any(re.search(rf"\b{re.escape(k)}\b", message) for k in named), (
            f"the 400 must name one of the schema's keywords {sorted(named)}: {message}")
        return
    for choice in reply.json()["choices"]:
        if choice["finish_reason"] == "stop":  # cut by max_tokens: unfinished, checked at engine level above
            jsonschema.validate(json.loads(choice["text"]), json.loads(json.dumps(schema)))


@pytest.mark.task("8.7")  # the engine's path: Task 8.5's own test of depth is test_json_schema's, on schema_to_regex
@pytest.mark.parametrize("schema,keyword", [pytest.param(nested_types(800), "type", marks=pytest.mark.ungraded),  # provided
                                            (nested_any_of(300), "anyOf")],
                         ids=["type in 800 lists", "anyOf 300 deep"])  # (hypothesis cannot print such examples)
def test_a_deeply_nested_schema_is_refused_by_keyword_without_a_recursion_error(engine, schema, keyword):  # noqa: F811
    with pytest.raises(PatternError, match=rf"^{keyword}\b"):
        engine.generate("x", max_tokens=4, json_schema=schema)


@pytest.mark.task("8.7")
def test_stats_show_the_index_cache_bytes_against_its_budget(engine):  # noqa: F811
    from miniyaie.structured import Limits

    engine.generate("x", max_tokens=4, regex="[a-z]{3}")
    stats = engine.get_stats()["structured_output"]
    assert stats["index_cache_budget_bytes"] == Limits().cache_bytes
    assert 0 < stats["index_cache_bytes"] <= stats["index_cache_budget_bytes"] and stats["indexes"] >= 1
    assert stats["indexes_in_use"] == 0, "a finished request gives its index back"
