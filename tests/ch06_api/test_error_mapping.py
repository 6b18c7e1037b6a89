"""Task 6.3 on its own: engine errors and schema refusals become error objects a client can act on.

A small FastAPI app with the server's error handlers and its request models; no engine, no server.
"""

import json

import pytest
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.api.errors import from_engine_error, install_error_handlers, validation_message
from miniyaie.api.protocol import ChatCompletionRequest
from miniyaie.engine import EngineError, InvalidRequestError, ModelLoadError, RequestFailedError, ResourceExhaustedError
from miniyaie.engine.errors import PromptTooLongRequestError

MESSAGES = [{"role": "user", "content": "hi"}]

ENGINE_ERRORS = {
    "the KV cache can never hold it": (ResourceExhaustedError("needs 1600 tokens; the pool holds 512"), 400, "kv_cache_exceeded"),
    "a bad parameter": (InvalidRequestError("top_p must be in (0, 1]"), 400, "invalid_value"),
    "a prompt too long (a subclass)": (PromptTooLongRequestError("prompt has 9000 tokens"), 400, "invalid_value"),
    "a fault while running it": (RequestFailedError("the detokenizer raised"), 500, "request_failed"),
    "the engine loop stopped": (EngineError("the engine loop has stopped"), 503, "engine_unavailable"),
    "a model that cannot load": (ModelLoadError("no such model"), 503, "engine_unavailable"),
}


@pytest.mark.task("6.3")
@pytest.mark.parametrize("case", ENGINE_ERRORS, ids=list(ENGINE_ERRORS))
def test_each_engine_error_gets_the_status_and_code_that_tell_the_client_what_to_do(case):
    exc, status, code = ENGINE_ERRORS[case]
    error = from_engine_error(exc)
    assert (error.status, error.code) == (status, code), (
        f"{case} ({type(exc).__name__}): got {error.status} {error.code!r}, expected {status} {code!r}"
        + (": no retry can ever make it fit, so it is the request that must change (4xx)" if status == 400 and error.status >= 500 else "")
    )
    assert error.message == str(exc) and error.param is None


def app_with_handlers(raise_this: Exception | None = None) -> TestClient:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/chat")
    async def chat(body: ChatCompletionRequest):
        if raise_this is not None:
            raise raise_this
        return {"ok": True}

    return TestClient(app, raise_server_exceptions=False)


def refused(body: bytes | dict) -> dict:
    client = app_with_handlers()
    content = body if isinstance(body, bytes) else json.dumps(body).encode()  # ASCII escapes: a lone surrogate travels
    reply = client.post("/chat", content=content, headers={"content-type": "application/json"})
    assert reply.status_code == 400, f"{body!r}: status {reply.status_code} ({reply.text}), expected 400"
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_value"
    return error


SCHEMA_REFUSALS = {  # body -> (param, words the message must hold)
    "max_tokens as a string": ({"max_tokens": "5"}, "max_tokens", "integer"),
    "max_tokens zero": ({"max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
    "unknown role": ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role", "'user'"),
    "content not a string (every error a wrong type)": ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content",
                                                        "valid string"),
    "a typo in a field name": ({"temprature": 0.5}, "temprature", "not permitted"),
    "too many stop strings (a union: str | list)": ({"stop": ["x"] * 17}, "stop", "at most 16"),
    "a lone surrogate (our own validator)": ({"messages": [{"role": "user", "content": "a\ud800b"}]}, "messages.0.content",
                                             "lone surrogate"),
}


@pytest.mark.task("6.3")
@pytest.mark.parametrize("case", SCHEMA_REFUSALS, ids=list(SCHEMA_REFUSALS))
def test_a_schema_refusal_names_the_field_as_the_client_wrote_it(case):
    fields, param, words = SCHEMA_REFUSALS[case]
    error = refused({"model": "m", "messages": MESSAGES, **fields})
    assert error["param"] == param, f"{case}: param {error['param']!r}, expected {param!r} (no 'body', no union tags)"
    assert error["message"].startswith(f"{param}: "), f"{case}: the message {error['message']!r} must start with '{param}: '"
    assert "Value error, " not in error["message"], "pydantic's 'Value error, ' prefix is noise: remove it"
    assert words in error["message"], (
        f"{case}: the message {error['message']!r} does not say the real problem ({words!r}); of a union's errors, "
        "report the first that is not merely a wrong type for one member"
    )


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


@pytest.mark.task("6.3")
@given(st.text(min_size=1, max_size=30).map(str.encode).filter(lambda b: b.strip() and not _is_json(b)))  # UTF-8 (6.2 refuses the rest); an empty body is a missing one
@example(b'{"model": "m", "messages": [')
@example(b"{'model': 'm'}")
def test_a_body_that_is_not_json_is_said_so_with_no_param(body):
    error = refused(body)
    assert (error["message"], error["param"]) == ("the body is not valid JSON", None)


@pytest.mark.task("6.3")
def test_an_engine_error_raised_in_a_route_leaves_as_its_error_object():
    reply = app_with_handlers(ResourceExhaustedError("never fits")).post("/chat", json={"model": "m", "messages": MESSAGES})
    assert reply.status_code == 400
    assert reply.json() == {"error": {"message": "never fits", "type": "invalid_request_error", "param": None,
                                      "code": "kv_cache_exceeded"}}


field_names = st.sampled_from(["messages", "content", "role", "stop", "max_tokens", "response_format", "type", "x"])
union_tags = st.sampled_from(["str", "int", "float", "bool", "list", "dict", "none", "list[str]", "list[dict[str,any]]",
                              "function-after", "tagged-union", "function-before[_valid_unicode(), constrained-str]"])
location_parts = st.one_of(field_names.map(lambda n: ("name", n)), st.integers(0, 20).map(lambda i: ("name", i)),
                           union_tags.map(lambda t: ("tag", t)))


@pytest.mark.task("6.3")
@given(st.lists(location_parts, max_size=6), st.sampled_from(["missing", "too_long", "string_type"]))
@example([("name", "messages"), ("name", 0), ("name", "content"), ("tag", "list[dict[str,any]]")], "too_long")
@example([("name", "stop"), ("tag", "function-after")], "value_error")
@example([("tag", "str")], "string_type")
@example([], "missing")
def test_param_is_the_location_without_body_and_union_tags(parts, kind):
    loc = ("body", *(value for _, value in parts))
    names = [str(value) for what, value in parts if what == "name"]
    message, param = validation_message(RequestValidationError([{"type": kind, "loc": loc, "msg": "Value error, it is wrong"}]))
    expected = ".".join(names) or None
    assert param == expected, f"loc {loc}: param {param!r}, expected {expected!r}"
    assert message == (f"{expected}: it is wrong" if expected else "it is wrong")


@pytest.mark.task("6.3")
def test_the_first_complaint_that_is_not_a_wrong_type_is_reported_else_the_first():
    def report(*errors):
        return validation_message(RequestValidationError([{"loc": ("body", "f"), **e} for e in errors]))[0]

    assert report({"type": "json_invalid", "msg": "x"}, {"type": "missing", "msg": "y"}) == "the body is not valid JSON", (
        "a first error of type json_invalid is the whole answer")
    assert report({"type": "string_type", "msg": "a"}, {"type": "list_type", "msg": "b"}) == "f: a", (
        "every error is a wrong type (..._type): report the first of all")
    got = report({"type": "string_type", "msg": "a"}, {"type": "too_long", "msg": "b"}, {"type": "missing", "msg": "c"})
    assert got == "f: b", f"got {got!r}: report the FIRST error whose type does not end in _type (too_long, 'b')"
