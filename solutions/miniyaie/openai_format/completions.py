"""The `text_completion` object of /v1/completions and the chunks of its stream."""

from __future__ import annotations

import time

from miniyaie.openai_format.common import usage
from miniyaie.openai_format.results import CompletionDelta, GenerationOutput, TokenLogprob, is_final


def completion_logprobs(entries: list[TokenLogprob] | None) -> dict | None:
    """The legacy completions shape: parallel lists of token texts, their logprobs and the top alternatives.

    Its top alternatives are a dict keyed by text, so two tokens spelled alike
    (two halves of different characters both read as U+FFFD) share one key:
    the likelier one keeps it (entries come best first).
    """
    if entries is None:
        return None
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [_by_text(e) for e in entries],
    }


def _by_text(entry: TokenLogprob) -> dict[str, float]:
    top: dict[str, float] = {}
    for t in entry.top_logprobs:
        top.setdefault(t.token, t.logprob)
    return top


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
        if not is_final(item):
            if not (item.text or item.finish_reason or item.logprobs):
                return []
            choice = {"index": item.index, "text": item.text, "logprobs": completion_logprobs(item.logprobs),
                      "finish_reason": item.finish_reason}
            return [self._chunk([choice])]
        return [self._chunk([], usage(item))] if self.include_usage else []

    def _chunk(self, choices: list[dict], usage_: dict | None = None) -> dict:
        chunk = {"id": self.request_id, "object": "text_completion", "created": self.created, "model": self.model,
                 "choices": choices}
        if usage_ is not None:
            chunk["usage"] = usage_
        return chunk
