"""A client that hangs up on a non-streaming request aborts it: decoding stops and its KV blocks come back.

A non-streaming answer sends nothing until it is complete, so nothing on the
response side notices the hang-up; the server must listen for it. The model
here sleeps a little in every forward pass, so a request of 80 tokens runs
for seconds: a hang-up that is noticed ends it long before its end.
"""

import json
import socket
import time

import pytest
from server_helpers import MODEL, start_server, wait_until_idle

MAX_TOKENS = 80  # the tiny model's context is 128 tokens
STEP_SECONDS = 0.03


@pytest.fixture(scope="module")
def slow_served(tiny_dir):
    """(engine, server) over a fresh copy of the tiny model whose every forward pass sleeps STEP_SECONDS."""
    from miniyaie.model import load

    loaded = load(str(tiny_dir[0]))
    forward = loaded.model.forward

    def slow_forward(*args, **kwargs):
        time.sleep(STEP_SECONDS)
        return forward(*args, **kwargs)

    loaded.model.forward = slow_forward
    engine, server = start_server(loaded)
    yield engine, server
    server.__exit__(None, None, None)
    engine.close()


def post_then_hang_up(server, engine, path: str, body: dict) -> None:
    """Send the request, wait until the engine is decoding it with KV blocks held, then close the connection."""
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    before = engine.get_stats()["tokens"]["output"]
    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        sock.sendall(head + data)
        sock.setblocking(False)
        deadline = time.monotonic() + 30
        while True:
            stats = engine.get_stats()
            if stats["kv_blocks"]["held_by_requests"] > 0 and stats["tokens"]["output"] > before:
                break
            try:
                early = sock.recv(4096)
            except BlockingIOError:
                early = None
            assert early is None, f"the server answered before decoding: {early!r}"
            assert time.monotonic() < deadline, f"the request never started decoding: {stats}"
            time.sleep(0.005)
    # leaving `with` closed the socket mid-generation: nothing was answered yet


def metric(server, name: str, **labels) -> float:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{server.url}/metrics").text
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.mark.task("6.6")  # through a slow server: needs Tasks 6.4 (the race), 6.5 (the request) and 6.6 (the batch)
@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "tell me a long story"}]}),
    ("/v1/completions", {"prompt": "Once upon a time"}),
    ("/v1/completions", {"prompt": ["Once upon a time", "hello engine"], "n": 2}),
], ids=["chat", "completion", "batch of prompts, n=2"])
def test_a_client_that_hangs_up_on_a_non_streaming_request_aborts_it(slow_served, path, body):
    engine, server = slow_served
    wait_until_idle(engine)
    before = engine.get_stats()
    hang_ups = metric(server, "miniyaie_http_requests_total", endpoint=path, status="499")
    post_then_hang_up(server, engine, path, {"model": MODEL, "max_tokens": MAX_TOKENS, "ignore_eos": True, **body})

    after = wait_until_idle(engine)
    completions = len(body["prompt"]) * body.get("n", 1) if isinstance(body.get("prompt"), list) else 1
    generated = after["tokens"]["output"] - before["tokens"]["output"]
    assert generated < completions * MAX_TOKENS, "the request decoded to its end after its client hung up"
    assert after["kv_blocks"]["held_by_requests"] == 0, "the aborted request's KV blocks did not come back"
    assert after["requests"]["in_flight"] == 0
    engine.llm.memory.check_integrity()
    deadline = time.monotonic() + 10  # the hang-up is counted once the route has ended
    while metric(server, "miniyaie_http_requests_total", endpoint=path, status="499") == hang_ups:
        assert time.monotonic() < deadline, "the hang-up was not counted as a 499 (client closed request)"
        time.sleep(0.02)


@pytest.mark.task("6.6")
def test_a_client_that_waits_gets_its_whole_answer(slow_served):
    """The control: the same kind of request, not hung up on, runs to max_tokens (the listener does not end it)."""
    import httpx

    engine, server = slow_served
    reply = httpx.post(f"{server.url}/v1/completions", timeout=60,
                       json={"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8, "ignore_eos": True})
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 8
    assert wait_until_idle(engine)["kv_blocks"]["held_by_requests"] == 0
