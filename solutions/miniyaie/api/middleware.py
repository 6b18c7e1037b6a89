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
        # Nudge: count bytes as they arrive, never trust the sender to stop; then hand the app a receive that replays.
        # Hint 1: A Content-Length header is a promise, not a limit: a client can send no header
        #   (chunked) or lie, so the bytes actually received are counted as each message arrives,
        #   and the read stops the moment the count passes the limit (reading a 1 GB body
        #   before refusing it is the attack this guards against). The header still lets an
        #   honest oversized request be refused without reading anything. Once this middleware
        #   has consumed the body, the app can no longer receive it: give the app a new
        #   receive that returns the body once, then defers to the real one.
        # Hint 2: If the header (headers are (bytes, bytes) pairs) parses as a number over
        #   max_bytes, send 413 and return. Loop: receive a message; on "http.disconnect"
        #   return; add len(message.get("body", b"")) to the count, 413 if over; keep the
        #   chunk; continue while message.get("more_body"). Join the chunks, try to decode
        #   UTF-8, and on UnicodeDecodeError send 400 naming exc.start. Then call the app with a
        #   replay function: its first call returns {"type": "http.request", "body": body,
        #   "more_body": False}, later calls return await receive().
        # Hint 3:
        #   declared = dict(scope["headers"]).get(b"content-length", b"0")
        #   if declared.isdigit() and int(declared) > max: return await _send_error(send, 413, ..., "body_too_large")
        #   chunks, size, more = [], 0, True
        #   while more: message = await receive(); disconnect -> return; size += len(chunk); over -> 413; append; more = message.get("more_body", False)
        #   body = b"".join(chunks); try body.decode("utf-8") except UnicodeDecodeError as exc: 400 "... (byte {exc.start})", "invalid_encoding"
        #   replayed = False; async def replay(): first call -> the body message; later -> await receive()
        #   await self.app(scope, replay, send)
        # BEGIN SOLUTION 6.2: Guard the door
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
        # END SOLUTION
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
        # Nudge: a key check that refuses before the body is read, and says how to authenticate.
        # Hint 1: Health checks come from load balancers that hold no key, so /health stays open;
        #   everything else needs the header. ASGI headers are a list of (bytes, bytes) pairs with
        #   lower-case names. A refusal must not reach the app at all: answer and return.
        # Hint 2: If the scope is "http" and its path is not public: look the authorization header
        #   up (b"" when absent), compare it with self.expected using hmac.compare_digest, and on a
        #   mismatch send the 401 error object (_send_error with the extra header) and return.
        #   Otherwise await the app.
        # Hint 3:
        #   if scope["type"] == "http" and scope["path"] not in PUBLIC_PATHS:
        #       given = dict(scope["headers"]).get(b"authorization", b"")
        #       if not hmac.compare_digest(given, self.expected):
        #           return await _send_error(send, 401, "...", "invalid_api_key", [(b"www-authenticate", b"Bearer")])
        #   await self.app(scope, receive, send)
        # BEGIN SOLUTION 6.2: Guard the door
        if scope["type"] == "http" and scope["path"] not in PUBLIC_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                return await _send_error(send, 401, "missing or wrong API key (send 'Authorization: Bearer <key>')",
                                         "invalid_api_key", [(b"www-authenticate", b"Bearer")])
        await self.app(scope, receive, send)
        # END SOLUTION
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
        # Nudge: whether you may still answer depends on what has already been sent.
        # Hint 1: An HTTP response starts with its status line: once "http.response.start" has
        #   gone out, no other status can follow, and a second start is a protocol error. So
        #   watch what the app sends (wrap send). An exception before the start becomes a 500
        #   error object (and its traceback in the log, where the operator looks); one after it
        #   cannot be answered: let it go on up, the ASGI server closes the connection.
        # Hint 2: Define an async tracking send that notes when a message of type
        #   "http.response.start" passes and forwards every message to send. Await the app with
        #   it inside try; on Exception: if the response had started, raise again; otherwise
        #   log.error with exc_info=exc and send a 500 with code "internal_error" whose message
        #   names the exception's class (never its text, which may hold internals).
        # Hint 3:
        #   started = False
        #   async def tracking_send(message): started = started or message is a response start; await send(message)
        #   try: await self.app(scope, receive, tracking_send)
        #   except Exception as exc:
        #       if started: raise
        #       log.error(...); await _send_error(send, 500, f"internal server error ({type(exc).__name__}); ...", "internal_error")
        # BEGIN SOLUTION 6.2: Guard the door
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
        # END SOLUTION
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
        # Nudge: count what is sent, not what is asked; and never let a client choose your labels.
        # Hint 1: The status is known only when the app sends it (a route, a guard's 401 or 413, the
        #   error guard's 500), so wrap `send` and watch what passes through it. A label value
        #   makes a new time series in every scraper; a path taken as it is lets anyone who
        #   requests /a, /b, /c... grow your metrics without end, so only known paths are labels.
        # Hint 2: Work out the endpoint label from scope["path"] first ("other" unless it is in
        #   self.endpoints). Wrap send in an async function that, for a message of type
        #   "http.response.start", increments the counter with that endpoint and str(status), and
        #   forwards every message. Await the app with the wrapped send.
        # Hint 3:
        #   endpoint = scope["path"] if scope["path"] in self.endpoints else "other"
        #   async def counting_send(message):
        #       if message["type"] == "http.response.start": self.counter.labels(endpoint=endpoint, status=str(message["status"])).inc()
        #       await send(message)
        #   await self.app(scope, receive, counting_send)
        # BEGIN SOLUTION 6.1: What an operator watches
        endpoint = scope["path"] if scope["path"] in self.endpoints else "other"

        async def counting_send(message):
            if message["type"] == "http.response.start":
                self.counter.labels(endpoint=endpoint, status=str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)
        # END SOLUTION
# ANCHOR_END: request_counter
