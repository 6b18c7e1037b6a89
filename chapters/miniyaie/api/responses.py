"""OpenAI response objects for /v1/completions and the chunks of its stream.

Chat objects and chat chunks come from the engine (miniyaie/engine/openai_format.py);
this module adds the `text_completion` shapes and turns a completion request's
stream of engine items into chunks.
"""

from __future__ import annotations

import time

from miniyaie.engine import CompletionDelta, GenerationOutput, TokenLogprob
from miniyaie.engine import openai_format


def completion_logprobs(entries: list[TokenLogprob] | None) -> dict | None:
    """The legacy completions shape: parallel lists of tokens, their logprobs and the top alternatives."""
    if entries is None:
        return None
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{t: lp for _, t, lp in e.top_logprobs} for e in entries],
    }


def usage(results: list[GenerationOutput]) -> dict:
    """Usage summed over a batch, with the prompt tokens served from the prefix cache."""
    prompt = sum(r.prompt_tokens for r in results)
    completion = sum(r.completion_tokens for r in results)
    cached = sum(r.cached_tokens for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def text_completion(request_id: str, model: str, results: list[GenerationOutput], n: int) -> dict:
    """A `text_completion` for a batch of prompts: choice index = prompt index * n + completion index."""
    choices = [
        {"index": p * n + c.index, "text": c.text, "logprobs": completion_logprobs(c.logprobs),
         "finish_reason": c.finish_reason}
        for p, result in enumerate(results) for c in result.outputs
    ]
    return {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage(results)}


class CompletionChunker:
    """A completion request's engine items as `text_completion` chunks (usage last when asked for)."""

    def __init__(self, request_id: str, model: str, include_usage: bool):
        self.request_id, self.model, self.include_usage = request_id, model, include_usage
        self.created = int(time.time())

    def feed(self, item: CompletionDelta | GenerationOutput) -> list[dict]:
        if isinstance(item, CompletionDelta):
            if not (item.text or item.finish_reason or item.logprobs):
                return []
            choice = {"index": item.index, "text": item.text, "logprobs": completion_logprobs(item.logprobs),
                      "finish_reason": item.finish_reason}
            return [self._chunk([choice])]
        return [self._chunk([], usage([item]))] if self.include_usage else []

    def _chunk(self, choices: list[dict], usage_: dict | None = None) -> dict:
        chunk = {"id": self.request_id, "object": "text_completion", "created": self.created, "model": self.model,
                 "choices": choices}
        if usage_ is not None:
            chunk["usage"] = usage_
        return chunk

