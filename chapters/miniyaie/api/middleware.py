"""What wraps every route: the request count, a catch-all for errors nobody expected, the API key, the body.

    RequestCounter -> InternalErrorGuard -> ApiKeyGuard -> BodyGuard -> the route
    (outermost first: a request without the right key is refused before its body is read)

Pure ASGI middleware (not Starlette's BaseHTTPMiddleware): it passes a
streaming response and the client's disconnect through untouched.
"""

from __future__ import annotations

import json
import logging

from miniyaie.api.errors import error_body

log = logging.getLogger("miniyaie.api")

PUBLIC_PATHS = {"/health"}  # answered without the API key


async def _send_error(send, status: int, message: str, code: str, headers: list | None = None) -> None:
    body = json.dumps(error_body(status, message, code=code)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


# ANCHOR: body_guard
class BodyGuard:
    """Read the whole body first: refuse it when over `max_bytes` (413) or not UTF-8 (400); then replay it.

    Contract, for an "http" scope (any other scope passes through untouched):
    - a Content-Length over `max_bytes` is refused before a single message is read;
    - otherwise the body's messages are read (a body may come in many chunks, with
      no Content-Length at all); the moment the bytes read pass `max_bytes`, reading
      stops (nothing more is received) and the answer is 413, code "body_too_large".
      A body of exactly `max_bytes` is fine;
    - a body that is not UTF-8 gets 400, code "invalid_encoding", and its message
      names the offset of the first bad byte ("byte 7");
    - a client that hangs up (`http.disconnect`) while its body is read gets nothing;
    - a refused request never reaches the app. An accepted one does, with a
      `receive` whose first message is the whole body in one `http.request`
      (`more_body` False) and whose later calls are the client's own `receive`
      (that is how the route still hears a hang-up).
    Errors are OpenAI error objects (`_send_error`).
    """

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        # Idea: count bytes as they arrive, never trust the sender to stop; then hand the app a receive that replays.
        # Stuck? `miniyaie hint 6.2` prints hints, one level at a time.
        # TODO(Task 6.2): Guard the door. Replace this line with your code.
        raise NotImplementedError('Chapter 6, Task 2: Guard the door — see book/src/ch06_api.md')
# ANCHOR_END: body_guard


# ANCHOR: api_key_guard
class ApiKeyGuard:
    """401 unless `Authorization: Bearer <key>`, on every path but /health.

    Contract, for an "http" scope whose path is not in PUBLIC_PATHS (any other scope, and /health,
    pass through untouched): the request reaches the app only when its authorization header is
    exactly b"Bearer " + the key. Otherwise the answer is 401, code "invalid_api_key", with the
    header `www-authenticate: Bearer` (how HTTP says which scheme to use), and the app never sees
    the request (its body is not read). The comparison takes as long however many leading
    bytes are right: one that stops at the first wrong byte tells an attacker, by its timing,
    how many were.
    """

    def __init__(self, app, api_key: str):
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        # Idea: a key check that refuses before the body is read, and says how to authenticate.
        # Stuck? `miniyaie hint 6.2` prints hints, one level at a time.
        # TODO(Task 6.2): Guard the door. Replace this line with your code.
        raise NotImplementedError('Chapter 6, Task 2: Guard the door — see book/src/ch06_api.md')
# ANCHOR_END: api_key_guard


# ANCHOR: internal_error_guard
class InternalErrorGuard:
    """An exception no handler expected: log its traceback, answer 500 with an OpenAI error object.

    Without it the client would get Starlette's plain-text "Internal Server
    Error", which OpenAI clients cannot parse. A response already under way
    (a stream) cannot change its status: the exception goes on to the ASGI
    server, which logs it and closes the connection.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        # Idea: whether you may still answer depends on what has already been sent.
        # Stuck? `miniyaie hint 6.2` prints hints, one level at a time.
        # TODO(Task 6.2): Guard the door. Replace this line with your code.
        raise NotImplementedError('Chapter 6, Task 2: Guard the door — see book/src/ch06_api.md')
# ANCHOR_END: internal_error_guard


# ANCHOR: request_counter
class RequestCounter:
    """Count every HTTP response by endpoint and status: the outermost wrapper, so it sees every answer.

    Contract, for an "http" scope (any other scope passes through untouched, uncounted): once
    per response, when its status goes out (`http.response.start`), `counter.labels(endpoint=...,
    status=...).inc()`, with the status as a string ("200") and the endpoint the request's path
    when it is one of `endpoints`, else "other". Every message the app sends reaches `send`
    unchanged and in order; an exception from the app goes on up (counted if its status had
    gone out). A request the app never answers is not counted.
    """

    def __init__(self, app, counter, endpoints: set[str]):
        self.app, self.counter, self.endpoints = app, counter, endpoints

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        # Idea: count what is sent, not what is asked; and never let a client choose your labels.
        # Stuck? `miniyaie hint 6.1` prints hints, one level at a time.
        # TODO(Task 6.1): What an operator watches. Replace this line with your code.
        raise NotImplementedError('Chapter 6, Task 1: What an operator watches — see book/src/ch06_api.md')
# ANCHOR_END: request_counter
