"""The FastAPI application: OpenAI's endpoints in front of one InferenceEngine.

    POST /v1/completions        continue a prompt            (JSON, or SSE with stream: true)
    POST /v1/chat/completions   answer a conversation        (JSON, or SSE with stream: true)
    GET  /v1/models             the served model
    GET  /health                {"status": "ok"}, or 503 when the engine loop has stopped
    GET  /stats                 engine.get_stats()
    GET  /metrics               Prometheus text format

Every request is checked in full (types, ranges, the model name, the
context, the KV pool) before anything is submitted, so a bad request gets
a 4xx and an accepted one streams to its end.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from fastapi import FastAPI, Response
from fastapi.responses import StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

import miniyaie
from miniyaie.api.errors import APIError, error_response, install_error_handlers
from miniyaie.api.metrics import ServerMetrics
from miniyaie.api.middleware import ApiKeyGuard, BodyGuard, RequestCounter
from miniyaie.api.params import sampling_params_for
from miniyaie.api.protocol import ChatCompletionRequest, CompletionRequest, prompts_of
from miniyaie.api.responses import CompletionChunker, text_completion
from miniyaie.api.streaming import collect, count_unfinished, event_stream
from miniyaie.engine import EngineError, InferenceEngine, openai_format

ENDPOINTS = {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/stats", "/metrics"}
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(frozen=True)
class ServerSettings:
    api_key: str | None = None  # when set, every path but /health needs "Authorization: Bearer <key>"
    served_model_names: tuple[str, ...] = ()  # names clients may ask for (default: the engine's model name)
    max_body_bytes: int = 1 << 20


def sse_response(events, timer) -> StreamingResponse:
    return StreamingResponse(count_unfinished(events, timer), media_type="text/event-stream", headers=SSE_HEADERS)


def create_app(engine: InferenceEngine, settings: ServerSettings | None = None) -> FastAPI:
    settings = settings or ServerSettings()
    names = settings.served_model_names or (engine.model_name,)
    metrics = ServerMetrics(engine)
    app = FastAPI(title="Mini-YAIE", version=getattr(miniyaie, "__version__", "0.1.0"),
                  description="An OpenAI-compatible API served by the Mini-YAIE engine.")
    app.state.engine, app.state.metrics = engine, metrics
    install_error_handlers(app)

    def check_model(name: str) -> None:
        if name not in names:
            raise APIError(404, f"model {name!r} is not served here; try one of: {', '.join(names)}",
                           param="model", code="model_not_found")

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
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "miniyaie"} for n in names]}

    @app.get("/stats")
    async def stats() -> dict:
        return engine.get_stats()

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # ANCHOR: chat_route
    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest):
        timer = metrics.timer()
        check_model(body.model)
        prompt, ids = engine.render_chat([m.model_dump(exclude_none=True) for m in body.messages])
        params = engine.check_request(ids, sampling_params_for(body, len(ids), engine.context_length, engine.sampling_defaults))
        request_id = openai_format.completion_id()
        items = engine.stream_async(prompt, params, request_id=request_id, prompt_token_ids=ids)
        if body.stream:
            chunker = openai_format.ChatChunker(request_id, body.model, params.n, include_usage(body))
            return sse_response(event_stream(items, chunker, timer), timer)
        return openai_format.chat_completion(await collect(items, timer), body.model)
    # ANCHOR_END: chat_route

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest):
        started = time.perf_counter()
        check_model(body.model)
        prompts = prompts_of(body)
        if body.stream and len(prompts) > 1:
            raise APIError(400, "stream one prompt at a time", param="prompt", code="invalid_value")
        checked = []
        for prompt in prompts:  # check every prompt before submitting any
            ids = list(prompt) if isinstance(prompt, list) else engine.encode(prompt)
            params = engine.check_request(ids, sampling_params_for(body, len(ids), engine.context_length, engine.sampling_defaults))
            text = prompt if isinstance(prompt, str) else engine.tokenizer.decode(ids)  # ids are checked: in the vocabulary
            checked.append((text, ids, params))
        request_id = f"cmpl-{openai_format.completion_id().split('-', 1)[1]}"
        streams = [engine.stream_async(text, params, request_id=f"{request_id}-{i}", prompt_token_ids=ids)
                   for i, (text, ids, params) in enumerate(checked)]
        if body.stream:
            chunker = CompletionChunker(request_id, body.model, include_usage(body))
            timer = metrics.timer(started)
            return sse_response(event_stream(streams[0], chunker, timer), timer)
        results = await asyncio.gather(*(collect(s, metrics.timer(started)) for s in streams))
        return text_completion(request_id, body.model, list(results), body.n)

    app.add_middleware(BodyGuard, max_bytes=settings.max_body_bytes)
    if settings.api_key:
        app.add_middleware(ApiKeyGuard, api_key=settings.api_key)
    app.add_middleware(RequestCounter, counter=metrics.requests, endpoints=ENDPOINTS)
    return app
