"""Chapter 6: the API server — OpenAI-compatible, streaming, observable, hard to break.

    from miniyaie.api import create_app, ServerSettings
    app = create_app(InferenceEngine("smollm2"), ServerSettings(api_key=None))
    uvicorn.run(app, host="127.0.0.1", port=8000)          # or: miniyaie serve

Modules, one job each: protocol (request models), params (request ->
SamplingParams, the server's defaults), errors (OpenAI error objects),
sse (event framing), streaming (collect or stream a request, abort it when
the client leaves), metrics (/metrics), middleware (counts, the catch-all
500, key, body), rag (--rag), app (the routes), server (run it). The
response objects and chunks are the engine's (miniyaie.openai_format).
"""

from miniyaie.api.app import ServerSettings, create_app
from miniyaie.api.rag import RagAdapter, Retriever

__all__ = ["create_app", "ServerSettings", "Retriever", "RagAdapter"]
