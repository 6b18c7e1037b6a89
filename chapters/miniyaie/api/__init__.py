"""Chapter 6: the API server — OpenAI-compatible, streaming, observable, hard to break.

    from miniyaie.api import create_app, ServerSettings
    app = create_app(InferenceEngine("smollm2"), ServerSettings(api_key=None))
    uvicorn.run(app, host="127.0.0.1", port=8000)          # or: miniyaie serve

Modules, one job each: protocol (request models), params (request ->
SamplingParams), errors (OpenAI error objects), sse (event framing),
responses (response objects and chunks), streaming (collect or stream a
request), metrics (/metrics), middleware (body, key, counts), rag (--rag),
app (the routes), server (run it).
"""

from miniyaie.api.app import ServerSettings, create_app
from miniyaie.api.rag import RagAdapter, Retriever

__all__ = ["create_app", "ServerSettings", "Retriever", "RagAdapter"]
