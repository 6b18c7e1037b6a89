"""Bad input gets an OpenAI error object and a 4xx; the server and engine live on and nothing leaks."""

import json

import httpx
import openai
import pytest
from server_helpers import MODEL, start_server, wait_until_idle

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

BAD_BODIES = {
    "bad JSON": (b'{"model": "tiny", "messages": [', 400, None),
    "not an object": (b"[1, 2]", 400, None),
    "max_tokens as a string": ({**CHAT, "max_tokens": "5"}, 400, "max_tokens"),
    "max_tokens zero": ({**CHAT, "max_tokens": 0}, 400, "max_tokens"),
    "max_tokens negative": ({**CHAT, "max_tokens": -3}, 400, "max_tokens"),
    "temperature negative": ({**CHAT, "temperature": -0.5}, 400, "temperature"),
    "top_p zero": ({**CHAT, "top_p": 0}, 400, "top_p"),
    "top_p above one": ({**CHAT, "top_p": 1.5}, 400, "top_p"),
    "empty messages": ({**CHAT, "messages": []}, 400, "messages"),
    "unknown role": ({**CHAT, "messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages.0.role"),
    "content not a string": ({**CHAT, "messages": [{"role": "user", "content": 5}]}, 400, "messages.0.content"),
    "n beyond the limit": ({**CHAT, "n": 17}, 400, "n"),
    "unknown field": ({**CHAT, "temprature": 0.5}, 400, "temprature"),
    "missing model": ({k: v for k, v in CHAT.items() if k != "model"}, 400, "model"),
    "unknown model": ({**CHAT, "model": "gpt-9"}, 404, "model"),
    "invalid UTF-8": (b'{"model": "tiny", "messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, None),
    "oversized body": ({**CHAT, "messages": [{"role": "user", "content": "x" * (1 << 20)}]}, 413, None),
    "too many stop strings": ({**CHAT, "stop": ["x"] * 17}, 400, "stop"),
    "top_logprobs without logprobs": ({**CHAT, "top_logprobs": 2}, 400, "top_logprobs"),
    "min_tokens above max_tokens": ({**CHAT, "min_tokens": 5}, 400, None),
    "kv pool too small for n x max_tokens": ({**CHAT, "n": 16, "max_tokens": 100}, 400, None),
    "lone surrogate in content": ({**CHAT, "messages": [{"role": "user", "content": "a\ud800b"}]}, 400, "messages.0.content"),
    "an image part": ({**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
                      400, "messages.0.content"),
    "a stop string too long": ({**CHAT, "stop": "x" * 257}, 400, "stop"),
}


@pytest.mark.parametrize("case", BAD_BODIES, ids=list(BAD_BODIES))
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_bad_requests_get_an_openai_error_and_lose_nothing(served, case, stream):
    engine, server = served
    body, status, param = BAD_BODIES[case]
    if isinstance(body, dict):
        body = json.dumps({**body, "stream": stream}).encode()
    before = engine.get_stats()
    reply = httpx.post(f"{server.url}/v1/chat/completions", content=body, headers={"content-type": "application/json"}, timeout=30)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    if param is not None:
        assert error["param"] == param
    after = wait_until_idle(engine)
    assert after["requests"]["finished"] == before["requests"]["finished"]  # nothing was submitted
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"


def test_a_request_that_can_never_fit_the_pool_is_refused_at_once(served):
    engine, server = served
    capacity = engine.get_stats()["kv_blocks"]["total"] * engine.get_stats()["kv_blocks"]["block_size"]
    reply = httpx.post(f"{server.url}/v1/completions", json={"model": MODEL, "prompt": "hi", "n": 16, "max_tokens": 100}, timeout=30)
    assert capacity < 16 * 100
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "kv_cache_exceeded"
    assert str(capacity) in reply.json()["error"]["message"]


def test_the_openai_client_raises_its_own_exception_classes(served, client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[], max_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=-1,
                                            stream=True))
    with pytest.raises(openai.NotFoundError):
        client.get("/no/such/path", cast_to=object)


def test_an_api_key_is_required_when_set(tiny_loaded):
    engine, server = start_server(tiny_loaded, num_blocks=64, api_key="s3cret")
    try:
        for key in ("wrong", ""):
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key or "x", max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                client.completions.create(model=MODEL, prompt="hi", max_tokens=1)
        bare = httpx.post(f"{server.url}/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 1})
        assert bare.status_code == 401 and bare.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(f"{server.url}/metrics").status_code == 401
        assert httpx.get(f"{server.url}/health").status_code == 200  # for load balancers
        good = openai.OpenAI(base_url=f"{server.url}/v1", api_key="s3cret", max_retries=0)
        assert good.completions.create(model=MODEL, prompt="hi", max_tokens=1).usage.completion_tokens == 1
    finally:
        server.__exit__(None, None, None)
        engine.close()


def test_the_api_key_is_checked_before_the_body_is_read(tiny_loaded):
    engine, server = start_server(tiny_loaded, num_blocks=64, api_key="s3cret", max_body_bytes=64)
    try:
        big = {"model": MODEL, "prompt": "x" * 200, "max_tokens": 1}
        assert httpx.post(f"{server.url}/v1/completions", json=big).status_code == 401, "no key: refused unread"
        keyed = httpx.post(f"{server.url}/v1/completions", json=big, headers={"Authorization": "Bearer s3cret"})
        assert keyed.status_code == 413 and keyed.json()["error"]["code"] == "body_too_large"
    finally:
        server.__exit__(None, None, None)
        engine.close()


@pytest.mark.ungraded
def test_the_server_binds_loopback_by_default():
    import inspect

    from miniyaie.serving.server import BackgroundServer, serve
    from miniyaie.cli import build_parser

    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"
    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"
    assert inspect.signature(BackgroundServer).parameters["host"].default == "127.0.0.1"
