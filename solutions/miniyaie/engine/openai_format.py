"""Shaping results as OpenAI chat-completion objects (what chapter 6 serves as JSON)."""

from __future__ import annotations

import time
import uuid

from miniyaie.engine.errors import InvalidRequestError
from miniyaie.engine.outputs import CompletionDelta, GenerationOutput, TokenLogprob

ROLES = ("system", "user", "assistant", "tool", "developer")


def check_messages(messages) -> list[dict]:
    """The messages as plain dicts; InvalidRequestError names the first bad one."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidRequestError("messages must be a non-empty list of {'role': ..., 'content': ...}")
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequestError(f"messages[{i}] must be a dict with 'role' and 'content'")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise InvalidRequestError(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise InvalidRequestError(f"messages[{i}].content must be a string")
        checked.append({"role": role, "content": content})
    return checked


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def _logprobs(entries: list[TokenLogprob] | None) -> dict | None:
    if entries is None:
        return None
    return {
        "content": [
            {
                "token": e.token, "logprob": e.logprob, "bytes": list(e.token.encode("utf-8")),
                "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))} for _, t, lp in e.top_logprobs],
            }
            for e in entries
        ]
    }


def usage(output: GenerationOutput) -> dict:
    return {
        "prompt_tokens": output.prompt_tokens,
        "completion_tokens": output.completion_tokens,
        "total_tokens": output.prompt_tokens + output.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": output.cached_tokens},
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
                "logprobs": _logprobs(c.logprobs),
                "finish_reason": c.finish_reason,
            }
            for c in output.outputs
        ],
        "usage": usage(output),
    }


def chat_chunk(request_id: str, model: str, created: int, choices: list[dict], usage_: dict | None = None) -> dict:
    chunk = {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices}
    if usage_ is not None:
        chunk["usage"] = usage_
    return chunk


def role_choice(index: int) -> dict:
    """The first chunk of each choice announces the role, as OpenAI does."""
    return {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}


def delta_choice(delta: CompletionDelta) -> dict:
    return {
        "index": delta.index,
        "delta": {"content": delta.text} if delta.text else {},
        "logprobs": _logprobs(delta.logprobs),
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
        if isinstance(item, CompletionDelta):
            if item.text or item.finish_reason or item.logprobs:
                chunks.append(self._chunk([delta_choice(item)]))
        elif self.include_usage:
            chunks.append(self._chunk([], usage(item)))
        return chunks

    def _chunk(self, choices: list[dict], usage_: dict | None = None) -> dict:
        return chat_chunk(self.request_id, self.model, self.created, choices, usage_)
