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


# ANCHOR: error_mapping
def from_engine_error(exc: EngineError) -> APIError:
    """The engine's typed errors as HTTP: the caller's fault is 400, the engine's is 5xx.

    Contract (the message is always str(exc), param None):
    - ResourceExhaustedError (the request can never fit this engine's KV cache): 400, code "kv_cache_exceeded";
    - InvalidRequestError, subclasses included (a parameter out of range, a prompt too long): 400, "invalid_value";
    - RequestFailedError (the engine failed while running this request): 500, "request_failed";
    - any other EngineError (the engine cannot serve: its loop stopped, a model that cannot load): 503,
      "engine_unavailable".
    """
    # Nudge: a status tells the client whether to fix its request, retry it, or go elsewhere.
    # Hint 1: A client decides what to do from the status alone: a 4xx means "change the request,
    #   sending it again is pointless", a 5xx "not your fault, perhaps try again later". A
    #   request that can never fit the KV cache sounds like an overloaded server, but no retry
    #   will ever succeed: it is the request that must change (fewer tokens, a smaller n). A
    #   failure while running a request is the engine's fault for that request alone (500);
    #   any other engine error means the engine cannot serve at all (503).
    # Hint 2: isinstance checks, one per row of the contract, most specific classes first; the
    #   last row catches every remaining EngineError. Build APIError(status, str(exc), code=...).
    # Hint 3:
    #   if isinstance(exc, ResourceExhaustedError): return APIError(400, str(exc), code="kv_cache_exceeded")
    #   if isinstance(exc, InvalidRequestError): return APIError(400, str(exc), code="invalid_value")
    #   if isinstance(exc, RequestFailedError): return APIError(500, str(exc), code="request_failed")
    #   return APIError(503, str(exc), code="engine_unavailable")
    # BEGIN SOLUTION 6.3: Errors a client can act on
    if isinstance(exc, ResourceExhaustedError):
        return APIError(400, str(exc), code="kv_cache_exceeded")
    if isinstance(exc, InvalidRequestError):
        return APIError(400, str(exc), code="invalid_value")
    if isinstance(exc, RequestFailedError):
        return APIError(500, str(exc), code="request_failed")
    return APIError(503, str(exc), code="engine_unavailable")
    # END SOLUTION


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """A request the schema refused, as (message, param) for a 400 error object.

    Contract, over pydantic's errors (`exc.errors()`: dicts with "type", "loc", "msg"; at least one):
    - if the first error's type is "json_invalid" the answer is ("the body is not valid JSON", None);
    - otherwise the error reported is the first whose type does not end in "_type", or the first of all
      when every one does: a field of a union type (`str | list[str]`) fails once per member, and a
      wrong-type error of one member hides the real problem with the other (a list that is too long);
    - param is its "loc" joined with ".", leaving out "body" and union-member tags (a str containing
      "[" or "-", such as "list[str]" or "function-after", or one of "str", "int", "float", "bool",
      "list", "dict", "none"): ("body", "messages", 0, "role") -> "messages.0.role"; None if nothing is left;
    - message is f"{param}: {msg}" (just msg when param is None), without the "Value error, " prefix
      pydantic puts before our own validators' messages.
    """
    # Nudge: say which field, in the client's words, and the one complaint that helps.
    # Hint 1: pydantic's location is its own path through the schema: it starts with where the
    #   data came from ("body") and, inside a union, names the member it tried ("list[str]").
    #   Neither means anything to a client, who named the field "stop" or "messages.0.role".
    #   A union field fails once per member, so the useful complaint is the one that is not
    #   merely "wrong type for this member". A body that is not JSON at all has no field.
    # Hint 2: errors = exc.errors(). The json_invalid case first. Then pick the first error whose
    #   type does not end with "_type", defaulting to errors[0]. Keep the parts of its loc that
    #   are not "body" and not tags (a str containing "[" or "-", or in _TYPE_TAGS), join them
    #   with "." (str() each, indexes are ints), None if empty. Remove the prefix from its msg.
    # Hint 3:
    #   if errors[0].get("type") == "json_invalid": return "the body is not valid JSON", None
    #   best = next((e for e in errors if not e.get("type", "").endswith("_type")), errors[0])
    #   parts = [str(p) for p in best["loc"] if p != "body" and not a tag]; param = ".".join(parts) or None
    #   message = str(best["msg"]).removeprefix("Value error, "); return (f"{param}: {message}" if param else message), param
    # BEGIN SOLUTION 6.3: Errors a client can act on
    errors = exc.errors()
    if errors[0].get("type") == "json_invalid":
        return "the body is not valid JSON", None
    best = next((e for e in errors if not e.get("type", "").endswith("_type")), errors[0])
    names = [p for p in best.get("loc", ()) if p != "body"]
    names = [p for p in names if not (isinstance(p, str) and ("[" in p or "-" in p or p in _TYPE_TAGS))]  # union tags
    param = ".".join(str(p) for p in names) or None
    message = str(best.get("msg")).removeprefix("Value error, ")  # our own validators' messages say it all
    return (f"{param}: {message}" if param else message), param
    # END SOLUTION
# ANCHOR_END: error_mapping


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
        message, param = validation_message(exc)
        return error_response(400, message, param, "invalid_value")

    @app.exception_handler(ClientDisconnected)
    async def _gone(request: Request, exc: ClientDisconnected):
        log.info("%s %s: the client hung up before its answer was ready; its request was aborted",
                 request.method, request.url.path)
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))
