"""What wraps every route: the request count, a catch-all for errors nobody expected, the API key, the body.

    RequestCounter -> InternalErrorGuard -> ApiKeyGuard -> BodyGuard -> the route
    (outermost first: a request without the right key is refused before its body is read)

Pure ASGI middleware (not Starlette's BaseHTTPMiddleware): it passes a
streaming response and the client's disconnect through untouched.
"""

from __future__ import annotations

import hmac
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
    """Read the whole body first: refuse it when over `max_bytes` (413) or not UTF-8 (400); then replay it."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await _send_error(send, 413, f"the body is larger than {self.max_bytes} bytes", "body_too_large")
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await _send_error(send, 413, f"the body is larger than {self.max_bytes} bytes", "body_too_large")
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return await _send_error(send, 400, f"the body is not valid UTF-8 (byte {exc.start})", "invalid_encoding")
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later: the client's disconnect

        await self.app(scope, replay, send)
# ANCHOR_END: body_guard


class ApiKeyGuard:
    """401 unless `Authorization: Bearer <key>` (every path but /health)."""

    def __init__(self, app, api_key: str):
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in PUBLIC_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                return await _send_error(send, 401, "missing or wrong API key (send 'Authorization: Bearer <key>')",
                                         "invalid_api_key", [(b"www-authenticate", b"Bearer")])
        await self.app(scope, receive, send)


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
        started = False

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started:
                raise
            log.error("%s %s failed", scope["method"], scope["path"], exc_info=exc)
            await _send_error(send, 500, f"internal server error ({type(exc).__name__}); the server's log has the details",
                              "internal_error")


class RequestCounter:
    """Count every HTTP response by endpoint and status (unknown paths count as 'other')."""

    def __init__(self, app, counter, endpoints: set[str]):
        self.app, self.counter, self.endpoints = app, counter, endpoints

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        endpoint = scope["path"] if scope["path"] in self.endpoints else "other"

        async def counting_send(message):
            if message["type"] == "http.response.start":
                self.counter.labels(endpoint=endpoint, status=str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)
