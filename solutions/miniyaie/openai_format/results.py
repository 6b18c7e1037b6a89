"""What OpenAI's shapes read of the engine's results, as structural types: this package imports nothing above it.

The engine's own classes (miniyaie.engine.outputs, of the same names) have these fields; so would a test's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class TopLogprob(Protocol):
    token: str
    logprob: float
    bytes: bytes


class TokenLogprob(TopLogprob, Protocol):
    top_logprobs: Sequence[TopLogprob]


class CompletionOutput(Protocol):
    index: int
    text: str
    finish_reason: str | None
    logprobs: Sequence[TokenLogprob] | None


class CompletionDelta(CompletionOutput, Protocol):
    """One step of a stream: new text of one completion."""


class GenerationOutput(Protocol):
    """A request's result: its completions (`outputs`) and its token counts."""

    request_id: str
    outputs: Sequence[CompletionOutput]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


def is_final(item: CompletionDelta | GenerationOutput) -> bool:
    """A request's result, not one of its stream's deltas."""
    return hasattr(item, "outputs")
