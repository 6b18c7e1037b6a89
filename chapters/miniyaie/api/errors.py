"""Every failure as an OpenAI error object: `{"error": {"message", "type", "param", "code"}}` and a 4xx/5xx.

Clients (the `openai` package included) read these fields to raise their
own exception classes, so the shape matters as much as the status. The
handlers here cover the errors the server expects; anything else becomes
a 500 of the same shape in middleware.InternalErrorGuard.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from miniyaie.engine import EngineError, InvalidRequestError, RequestFailedError, ResourceExhaustedError

log = logging.getLogger("miniyaie.api")

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               405: "invalid_request_error", 413: "invalid_request_error", 422: "invalid_request_error",
               500: "server_error", 503: "service_unavailable"}


class APIError(Exception):
    """An error the server answers on purpose, with its HTTP status."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


class ClientDisconnected(Exception):
    """The client hung up before its answer was ready; its engine requests were aborted."""


CLIENT_CLOSED_REQUEST = 499  # nginx's status for it: nobody reads the answer, but the request counter shows it


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def from_engine_error(exc: EngineError) -> APIError:
    """The engine's typed errors as HTTP: the caller's fault is 400, the engine's is 5xx."""
    if isinstance(exc, ResourceExhaustedError):
        return APIError(400, str(exc), code="kv_cache_exceeded")
    if isinstance(exc, InvalidRequestError):
        return APIError(400, str(exc), code="invalid_value")
    if isinstance(exc, RequestFailedError):
        return APIError(500, str(exc), code="request_failed")
    return APIError(503, str(exc), code="engine_unavailable")


def _field_path(loc) -> str | None:
    """'messages.0.role' from pydantic's location, without 'body' and union-member tags such as 'list[str]'."""
    parts = [str(p) for p in loc if p != "body" and not (isinstance(p, str) and ("[" in p or "-" in p or p in _TYPE_TAGS))]
    return ".".join(parts) or None


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if errors[0].get("type") == "json_invalid":
        return "the body is not valid JSON", None
    # a union (str | list[str]) fails once per member: a wrong type for one member is the least useful message
    best = next((e for e in errors if not e.get("type", "").endswith("_type")), errors[0])
    param = _field_path(best.get("loc", ()))
    message = str(best.get("msg")).removeprefix("Value error, ")  # our own validators' messages say it all
    return (f"{param}: {message}" if param else message), param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return error_response(exc.status, exc.message, exc.param, exc.code)

    @app.exception_handler(EngineError)
    async def _engine_error(request: Request, exc: EngineError):
        error = from_engine_error(exc)
        return error_response(error.status, error.message, error.param, error.code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        message, param = _validation_message(exc)
        return error_response(400, message, param, "invalid_value")

    @app.exception_handler(ClientDisconnected)
    async def _gone(request: Request, exc: ClientDisconnected):
        log.info("%s %s: the client hung up before its answer was ready; its request was aborted",
                 request.method, request.url.path)
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))
