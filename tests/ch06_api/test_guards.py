"""Task 6.2's middleware on its own: plain ASGI calls, no server.

BodyGuard reads a body however it is chunked, counts what arrives (not what
the header promises), stops reading the moment it is over the limit, and
replays the body to the app. ApiKeyGuard lets through only the right bearer
key (and /health without one). InternalErrorGuard answers an unexpected
exception with a 500 error object, unless the response has started.
"""

import asyncio
import json
import logging

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.api.middleware import ApiKeyGuard, BodyGuard, InternalErrorGuard



class Client:
    """The client's side of one ASGI call: the messages it sends, what it got back, how much was read."""

    def __init__(self, messages: list[dict], headers: list[tuple[bytes, bytes]] = ()):
        self.messages, self.headers = list(messages), list(headers)
        self.received = 0  # how many messages the middleware took
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        self.received += 1
        if self.received <= len(self.messages):
            return self.messages[self.received - 1]
        return {"type": "http.disconnect"}  # after the body: the client hangs up

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        assert len(starts) <= 1, f"{len(starts)} http.response.start messages: a response starts once"
        return starts[0]["status"] if starts else None

    @property
    def error(self) -> dict:
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return json.loads(body)["error"]


class App:
    """The route behind the guard: reads its body through `receive`, then the next message, then answers 200."""

    def __init__(self):
        self.called, self.body, self.more_body, self.after = False, None, None, None

    async def __call__(self, scope, receive, send):
        self.called = True
        first = await receive()
        assert first["type"] == "http.request", f"the app's first message is {first!r}, not the body"
        self.body, self.more_body = first.get("body", b""), first.get("more_body", False)
        self.after = await receive()  # the client's own next message
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def chunked(body: bytes, cuts: list[int]) -> list[dict]:
    """`body` as http.request messages cut at `cuts` (the last one says more_body False)."""
    edges = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    pieces = [body[a:b] for a, b in zip(edges, edges[1:])] or [b""]
    return [{"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)]


def guarded(max_bytes: int, client: Client) -> App:
    app = App()
    scope = {"type": "http", "method": "POST", "path": "/v1/completions", "headers": client.headers}
    asyncio.run(asyncio.wait_for(BodyGuard(app, max_bytes)(scope, client.receive, client.send), 5))
    return app


texts = st.text(max_size=40).map(lambda t: t.encode("utf-8"))


@pytest.mark.task("6.2")
@given(body=texts, cuts=st.lists(st.integers(0, 200), max_size=6), room=st.integers(0, 5))
@example(body=b'{"a": 1}', cuts=[], room=0)  # exactly max_bytes: accepted
@example(body=b"", cuts=[], room=0)  # an empty body is a body
def test_a_body_within_the_limit_reaches_the_app_whole_in_one_message(body, cuts, room):
    client = Client(chunked(body, cuts))
    app = guarded(len(body) + room, client)
    assert app.called, f"a {len(body)}-byte body under a {len(body) + room}-byte limit was refused: {client.sent!r}"
    assert app.body == body, f"the app got {app.body!r} instead of the whole body {body!r} (join the chunks)"
    assert app.more_body is False, "the replayed body is one message: more_body False"
    assert app.after == {"type": "http.disconnect"}, "after the body, the app's receive must be the client's own"
    assert client.status == 200


@pytest.mark.task("6.2")
def test_a_message_without_more_body_is_the_last_one():
    client = Client([{"type": "http.request", "body": b'{"a": 1}'}])  # ASGI: more_body defaults to False
    app = guarded(100, client)
    assert app.called and app.body == b'{"a": 1}', (
        f"an http.request without more_body ends the body (ASGI's default is False), but the app got "
        f"{app.body!r} (called: {app.called}); the guard read on to {client.received} messages"
    )


@pytest.mark.task("6.2")
@given(body=st.binary(min_size=1, max_size=60), cuts=st.lists(st.integers(0, 200), max_size=6), data=st.data())
@example(body=b"ab", cuts=[1], data=None)
def test_an_oversized_body_is_refused_as_soon_as_it_passes_the_limit(body, cuts, data):
    max_bytes = data.draw(st.integers(0, len(body) - 1)) if data is not None else 1
    messages = chunked(body, cuts)
    client = Client(messages)  # no Content-Length: chunked, or a client that does not say
    app = guarded(max_bytes, client)
    assert not app.called, "an oversized body must not reach the app"
    assert client.status == 413 and client.error["code"] == "body_too_large", client.sent
    sizes = [len(m["body"]) for m in messages]
    needed = next(i + 1 for i in range(len(sizes)) if sum(sizes[: i + 1]) > max_bytes)
    assert client.received == needed, (
        f"the limit was passed at message {needed}, but {client.received} were read: stop reading at once "
        "(a client could send gigabytes)")


@pytest.mark.task("6.2")
def test_a_content_length_over_the_limit_is_refused_before_reading():
    client = Client(chunked(b"x" * 10, []), headers=[(b"content-length", b"10")])
    app = guarded(9, client)
    assert not app.called and client.status == 413 and client.error["code"] == "body_too_large"
    assert client.received == 0, "the header alone says the body is too large: read nothing"


@pytest.mark.task("6.2")
def test_a_content_length_that_lies_does_not_get_past_the_count():
    client = Client(chunked(b"x" * 10, [3, 6]), headers=[(b"content-length", b"2")])
    app = guarded(5, client)
    assert not app.called and client.status == 413, "count the bytes that arrive, not those the header promises"


@pytest.mark.task("6.2")
@given(prefix=st.text(max_size=10), bad=st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82", b"\x80"]),
       suffix=st.sampled_from([b"", b"ok"]), cuts=st.lists(st.integers(0, 50), max_size=3))
def test_a_body_that_is_not_utf8_is_refused_naming_the_first_bad_byte(prefix, bad, suffix, cuts):
    head = prefix.encode("utf-8")
    body = head + bad + suffix
    client = Client(chunked(body, cuts))
    app = guarded(1000, client)
    assert not app.called, "a body that is not UTF-8 must not reach the app"
    assert client.status == 400 and client.error["code"] == "invalid_encoding", client.sent
    assert f"byte {len(head)}" in client.error["message"], (
        f"{client.error['message']!r} should name the first bad byte (byte {len(head)})")


@pytest.mark.task("6.2")
def test_a_client_that_hangs_up_mid_body_gets_nothing_and_the_app_is_not_called():
    client = Client([{"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}])
    app = guarded(100, client)
    assert not app.called and client.sent == [], f"nobody is listening: send nothing (sent {client.sent!r})"


# ------------------------------------------------------------------ InternalErrorGuard
def errors_through(app) -> Client:
    client = Client([{"type": "http.request", "body": b"", "more_body": False}])
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    asyncio.run(asyncio.wait_for(InternalErrorGuard(app)(scope, client.receive, client.send), 5))
    return client


@pytest.mark.task("6.2")
def test_an_unexpected_exception_becomes_a_500_error_object_and_a_logged_traceback(caplog):
    async def buggy(scope, receive, send):
        raise KeyError("secret-internal-name")

    with caplog.at_level(logging.ERROR, logger="miniyaie.api"):
        client = errors_through(buggy)
    assert client.status == 500, client.sent
    error = client.error
    assert error["type"] == "server_error" and error["code"] == "internal_error", error
    assert "KeyError" in error["message"], "say what kind of failure it was"
    assert "secret-internal-name" not in error["message"], "the exception's text stays in the log, not the answer"
    assert any(r.exc_info and r.exc_info[0] is KeyError for r in caplog.records), "log the traceback for the operator"


def raised_on(expected: Exception, guard, scope, client) -> None:
    """Run the guard; the app's exception (raised after its status went out) must come out of it as it is."""
    try:
        asyncio.run(asyncio.wait_for(guard(scope, client.receive, client.send), 5))
    except type(expected) as exc:
        assert str(exc) == str(expected), f"the app's own exception must go on up, got {exc!r}"
    else:
        pytest.fail(f"the app raised {expected!r} after http.response.start and the guard swallowed it (sent: "
                    f"{[m['type'] for m in client.sent]}): once the status is out, the exception goes on to the "
                    "ASGI server, which closes the connection")


@pytest.mark.task("6.2")
def test_an_exception_after_the_response_started_goes_on_up_and_nothing_more_is_sent():
    client = Client([])

    async def fails_mid_stream(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        raise RuntimeError("mid-stream")

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    raised_on(RuntimeError("mid-stream"), InternalErrorGuard(fails_mid_stream), scope, client)
    assert client.status == 200, "a response already under way keeps its status: no second start"
    assert len(client.sent) == 2, f"nothing may follow the app's own messages: {client.sent[2:]!r}"


@pytest.mark.task("6.2")
def test_an_exception_right_after_the_status_goes_on_up_too():
    client = Client([])

    async def fails_after_start(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("late")

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    raised_on(RuntimeError("late"), InternalErrorGuard(fails_after_start), scope, client)
    assert client.status == 200 and len(client.sent) == 1, "the status is sent: no 500 may follow it"


@pytest.mark.task("6.2")
def test_a_healthy_app_passes_through_unchanged():
    client = errors_through(App())
    assert client.status == 200
    assert [m["type"] for m in client.sent] == ["http.response.start", "http.response.body"]


# ---------------------------------------------------------------- the API key
KEY = "s3cret"


def behind_the_key(path: str, headers: list[tuple[bytes, bytes]], scope_type: str = "http") -> tuple[App, Client]:
    client = Client([{"type": "http.request", "body": b"{}", "more_body": False}], headers)
    app = App()
    scope = {"type": scope_type, "method": "POST", "path": path, "headers": client.headers}
    asyncio.run(asyncio.wait_for(ApiKeyGuard(app, KEY)(scope, client.receive, client.send), 5))
    return app, client


@pytest.mark.task("6.2")
@pytest.mark.parametrize("authorization", [None, b"", b"Bearer", b"Bearer ", b"Bearer wrong", b"Bearer s3cret ",
                                           b"bearer s3cret", b"Token s3cret", b"s3cret", b"Bearer s3cre"])
def test_a_request_without_the_right_bearer_key_gets_a_401_and_never_reaches_the_app(authorization):
    headers = [] if authorization is None else [(b"authorization", authorization)]
    app, client = behind_the_key("/v1/chat/completions", headers)
    assert client.status == 401, f"authorization {authorization!r}: status {client.status}, expected 401"
    assert not app.called, f"authorization {authorization!r} reached the app"
    assert client.received == 0, "the body of a refused request was read: refuse before reading it"
    assert client.error["code"] == "invalid_api_key" and client.error["type"] == "authentication_error"
    start = next(m for m in client.sent if m["type"] == "http.response.start")
    assert (b"www-authenticate", b"Bearer") in [(k.lower(), v) for k, v in start["headers"]], (
        "a 401 must say which scheme to use: the header www-authenticate: Bearer"
    )


@pytest.mark.task("6.2")
def test_the_right_key_passes_and_health_needs_none():
    app, client = behind_the_key("/v1/completions", [(b"authorization", b"Bearer s3cret")])
    assert app.called and client.status == 200, "the right key must reach the app"
    app, client = behind_the_key("/health", [])
    assert app.called and client.status == 200, "/health answers without a key (load balancers hold none)"
    app, client = behind_the_key("/v1/completions", [], scope_type="lifespan")
    assert app.called, "a scope that is not http passes through untouched"
