"""The `chat.completion` object and the `chat.completion.chunk`s of a streamed chat answer."""

from __future__ import annotations

import time

from miniyaie.openai_format.common import usage
from miniyaie.openai_format.results import CompletionDelta, GenerationOutput, TokenLogprob, is_final


def chat_logprobs(entries: list[TokenLogprob] | None) -> dict | None:
    """Chat's shape: one entry per token with its text, logprob, real bytes and top alternatives."""
    if entries is None:
        return None
    return {
        "content": [
            {
                "token": e.token, "logprob": e.logprob, "bytes": list(e.bytes),
                "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes)} for t in e.top_logprobs],
            }
            for e in entries
        ]
    }


def chat_completion(output: GenerationOutput, model: str, created: int | None = None) -> dict:
    """A `chat.completion` object for a finished result."""
    return {
        "id": output.request_id,
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [
            {
                "index": c.index,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": chat_logprobs(c.logprobs),
                "finish_reason": c.finish_reason,
            }
            for c in output.outputs
        ],
        "usage": usage(output),
    }


def role_choice(index: int) -> dict:
    """The first chunk of each choice announces the role, as OpenAI does."""
    return {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}


def delta_choice(delta: CompletionDelta) -> dict:
    return {
        "index": delta.index,
        "delta": {"content": delta.text} if delta.text else {},
        "logprobs": chat_logprobs(delta.logprobs),
        "finish_reason": delta.finish_reason,
    }


class ChatChunker:
    """A chat request's stream of engine items as `chat.completion.chunk`s: the role first, content, finish, usage.

    One implementation for both the engine's `chat_completion_stream` and chapter 6's SSE endpoint.
    """

    def __init__(self, request_id: str, model: str, n: int, include_usage: bool):
        self.request_id, self.model, self.n, self.include_usage = request_id, model, n, include_usage
        self.created = int(time.time())
        self.started = False

    def feed(self, item: CompletionDelta | GenerationOutput) -> list[dict]:
        chunks = []
        if not self.started:
            self.started = True
            chunks.append(self._chunk([role_choice(i) for i in range(self.n)]))
        if not is_final(item):
            if item.text or item.finish_reason or item.logprobs:
                chunks.append(self._chunk([delta_choice(item)]))
        elif self.include_usage:
            chunks.append(self._chunk([], usage(item)))
        return chunks

    def _chunk(self, choices: list[dict], usage_: dict | None = None) -> dict:
        chunk = {"id": self.request_id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                 "choices": choices}
        if usage_ is not None:
            chunk["usage"] = usage_
        return chunk
