"""The FastAPI application: OpenAI's endpoints in front of one InferenceEngine.

    POST /v1/completions        continue a prompt            (JSON, or SSE with stream: true)
    POST /v1/chat/completions   answer a conversation        (JSON, or SSE with stream: true)
    GET  /v1/models             the served model, and each LoRA adapter (chapter 11) with its parent
    GET  /health                {"status": "ok"}, or 503 when the engine loop has stopped
    GET  /stats                 engine.get_stats()
    GET  /metrics               Prometheus text format

Every request is checked in full (types, ranges, the model name, the
context, the KV pool, its pattern) before anything is submitted, so a bad
request gets a 4xx and an accepted one streams to its end. That checking
(template, tokenizer, pattern compile) runs on worker threads
(preparation.py), never on the event loop that serves everyone. A client
that hangs up before its answer is complete, streamed or not, has its
request aborted, its preparation cancelled. Fields a request leaves out
take the server's defaults (params.server_defaults). A request's `model`
picks a LoRA adapter by its name (chapter 11); the base model's names pick
none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse
from jinja2 import TemplateError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

import miniyaie
from miniyaie.api.errors import APIError, error_response, install_error_handlers
from miniyaie.api.metrics import ServerMetrics
from miniyaie.api.middleware import ApiKeyGuard, BodyGuard, InternalErrorGuard, RequestCounter
from miniyaie.api.params import sampling_params_for, server_defaults
from miniyaie.serving.preparation import Preparation
from miniyaie.serving.served_models import ServedModels
from miniyaie.api.protocol import ChatCompletionRequest, CompletionRequest, prompts_of
from miniyaie.api.response_format import structured_fields, with_structured_output
from miniyaie.api.streaming import collect, count_unfinished, event_stream, unless_disconnected
from miniyaie import openai_format
from miniyaie.engine import EngineError, InferenceEngine
from miniyaie.engine.prepared import PreparedRequest, RequestStream
from miniyaie.engine.sampling_params import generation_config_defaults

ENDPOINTS = {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/stats", "/metrics"}
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(frozen=True)
class ServerSettings:
    api_key: str | None = None  # when set, every path but /health needs "Authorization: Bearer <key>"
    served_model_names: tuple[str, ...] = ()  # names clients may ask for (default: the engine's model name)
    max_body_bytes: int = 1 << 20
    # defaults for fields a request leaves out, over the model's generation_config.json (e.g. {"temperature": 0})
    sampling_defaults: Mapping[str, object] = field(default_factory=dict)


class EventStreamResponse(StreamingResponse):
    """SSE over engine streams that are closed however the response ends, even if it never began
    (a client that left before the first byte): closing one aborts its request if still running."""

    def __init__(self, events, streams: Sequence[RequestStream]):
        super().__init__(events, media_type="text/event-stream", headers=SSE_HEADERS)
        self.streams = streams

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            for stream in self.streams:
                await stream.aclose()


def sse_response(events, timer, streams: Sequence[RequestStream]) -> StreamingResponse:
    return EventStreamResponse(count_unfinished(events, timer), streams)


def create_app(engine: InferenceEngine, settings: ServerSettings | None = None) -> FastAPI:
    settings = settings or ServerSettings()
    names = settings.served_model_names or (engine.model_name,)
    defaults = server_defaults(engine.sampling_defaults, generation_config_defaults(engine.loaded.path),
                               settings.sampling_defaults)
    served = ServedModels(names, engine.adapter_names(), defaults,  # a request's model may name a LoRA adapter
                          lambda message: APIError(404, message, param="model", code="model_not_found"))
    metrics = ServerMetrics(engine)
    preparation = Preparation(engine, unless_disconnected,
                              lambda: APIError(503, "the server is shutting down", code="shutting_down"))

    @asynccontextmanager
    async def lifespan(_app):
        yield
        preparation.close()  # its worker threads end

    app = FastAPI(title="Mini-YAIE", version=getattr(miniyaie, "__version__", "0.1.0"), lifespan=lifespan,
                  description="An OpenAI-compatible API served by the Mini-YAIE engine.")
    app.state.engine, app.state.metrics, app.state.preparation = engine, metrics, preparation
    app.state.stopping = preparation.stop  # the server calls it as its shutdown begins (server.py)
    install_error_handlers(app)

    def include_usage(body) -> bool:
        return bool(body.stream_options and body.stream_options.include_usage)

    @app.get("/health", responses={503: {"description": "the engine can no longer serve (an OpenAI error object says why)"}})
    async def health():
        try:
            engine.check_health()
        except EngineError as exc:  # its loop stopped: tell load balancers and orchestrators to replace us
            return error_response(503, str(exc), code="engine_dead")
        return {"status": "ok", "model": names[0]}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": served.listing()}

    @app.get("/stats")
    async def stats() -> dict:
        return engine.get_stats()

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def render_chat(body: ChatCompletionRequest) -> tuple[str, list[int]]:
        try:
            return engine.render_chat([m.model_dump(exclude_none=True) for m in body.messages])
        except TemplateError as exc:  # the template's own raise_exception("..."): these messages are not for this model
            raise APIError(400, f"the model's chat template refused these messages: {exc}", param="messages",
                           code="invalid_value") from None

    # ANCHOR: chat_route
    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        timer = metrics.timer()
        defaults = served.defaults_for(body.model)  # a 404 for a name not served; an adapter's name sets it

        def prepare(cancel: threading.Event) -> PreparedRequest:  # on a worker thread: template, tokens, checks, pattern
            prompt, ids = render_chat(body)
            params = with_structured_output(body, sampling_params_for(body, len(ids), engine.context_length, defaults))
            return engine.prepare(prompt, params, prompt_token_ids=ids, cancel=cancel)

        [prepared] = await preparation.prepare(request, [prepare], constrained=bool(structured_fields(body)))
        request_id = openai_format.completion_id()
        [items] = engine.submit_prepared([prepared], [request_id])
        if body.stream:
            chunker = openai_format.ChatChunker(request_id, body.model, prepared.params.n, include_usage(body))
            return sse_response(event_stream(items, chunker, timer), timer, [items])
        result = await unless_disconnected(request, collect(items, timer))  # a client that hangs up aborts it
        return openai_format.chat_completion(result, body.model)
    # ANCHOR_END: chat_route

    # ANCHOR: completions_route
    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        """One prompt or a batch of them (each text, or token ids whose text engine.prepare decodes), all or nothing.

        If any prompt is refused (too long for the context, ids outside the vocabulary, a
        parameter out of range), the answer is that refusal and no prompt has reached the
        engine. Otherwise every prompt runs, prompt i as engine request f"{request_id}-{i}"
        (openai_format.text_completion_id), concurrently: they share the engine's batches.
        Each prompt gets its own sampling parameters, as the chat route's one prompt does
        (its room in the context depends on its length). Preparing a prompt is slow work (a
        pattern may compile) and never runs on the event loop. A client that hangs up aborts
        every prompt of its batch. The answer lists each prompt's n choices in prompt order
        (openai_format.text_completion); with stream (one prompt: checked above) it is SSE, as
        in the chat route, chunked by openai_format.CompletionChunker.
        """
        started = time.perf_counter()
        defaults = served.defaults_for(body.model)  # a 404 for a name not served; an adapter's name sets it
        prompts = prompts_of(body)
        if body.stream and len(prompts) > 1:
            raise APIError(400, "stream one prompt at a time", param="prompt", code="invalid_value")
        constrained = bool(structured_fields(body))  # its preparation compiles a pattern
        # Idea: all or nothing: prepare every prompt before the first one starts, then let them run together.
        # Stuck? `miniyaie hint 6.6` prints hints, one level at a time.
        # TODO(Task 6.6): A batch of prompts, all or nothing. Replace this line with your code.
        raise NotImplementedError('Chapter 6, Task 6: A batch of prompts, all or nothing — see book/src/ch06_api.md')
    # ANCHOR_END: completions_route

    # the last one added runs first: count, catch the unexpected, check the key, then read the body
    app.add_middleware(BodyGuard, max_bytes=settings.max_body_bytes)
    if settings.api_key:
        app.add_middleware(ApiKeyGuard, api_key=settings.api_key)
    app.add_middleware(InternalErrorGuard)
    app.add_middleware(RequestCounter, counter=metrics.requests, endpoints=ENDPOINTS)
    return app
