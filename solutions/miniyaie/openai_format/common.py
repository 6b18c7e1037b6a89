"""What every OpenAI answer carries: an id and the token usage."""

from __future__ import annotations

import uuid

from miniyaie.openai_format.results import GenerationOutput, is_final


def completion_id() -> str:
    """A chat answer's id ("chatcmpl-...")."""
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def text_completion_id() -> str:
    """A completion answer's id ("cmpl-...")."""
    return f"cmpl-{uuid.uuid4().hex[:24]}"


def usage(results: GenerationOutput | list[GenerationOutput]) -> dict:
    """Token usage of one result or summed over a batch, with the prompt tokens served from the prefix cache."""
    results = [results] if is_final(results) else results
    prompt = sum(r.prompt_tokens for r in results)
    completion = sum(r.completion_tokens for r in results)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(r.cached_tokens for r in results)},
    }
