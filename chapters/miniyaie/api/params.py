"""From an OpenAI request body to the engine's SamplingParams, with the context checked first."""

from __future__ import annotations

from collections.abc import Mapping

from miniyaie.api.errors import APIError
from miniyaie.api.protocol import ChatCompletionRequest, CompletionRequest
from miniyaie.engine import SamplingParams

# request fields that are SamplingParams fields of the same name (None = "the server's default")
PASSED_THROUGH = ("temperature", "top_p", "n", "seed", "presence_penalty", "frequency_penalty",
                  "top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids")
# ANCHOR: server_defaults
OPENAI_DEFAULTS = {"temperature": 1.0, "top_p": 1.0}  # what OpenAI's API does with a field left out


def server_defaults(engine_defaults: SamplingParams, model_defaults: Mapping, operator_defaults: Mapping) -> SamplingParams:
    """What the fields a request leaves out become, first match wins.

    The operator's choice (ServerSettings.sampling_defaults, the `sampling:`
    section of `miniyaie serve --config`), then the model's
    generation_config.json (its authors' temperature, top_p, ...: what vLLM
    does), then OpenAI's defaults (temperature 1: sampling, not greedy), and
    for the fields none of them sets (max_tokens, ...) the engine's defaults.
    """
    return engine_defaults.with_updates(**{**OPENAI_DEFAULTS, **model_defaults, **operator_defaults})
# ANCHOR_END: server_defaults


def requested_logprobs(request: CompletionRequest | ChatCompletionRequest) -> int | None:
    """OpenAI spells it two ways: completions take `logprobs: k`, chat takes `logprobs: true` + `top_logprobs: k`."""
    if isinstance(request, CompletionRequest):
        return request.logprobs
    if request.top_logprobs is not None and not request.logprobs:
        raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
    return (request.top_logprobs or 0) if request.logprobs else None


def max_tokens_asked(request: CompletionRequest | ChatCompletionRequest) -> int | None:
    if isinstance(request, ChatCompletionRequest) and request.max_completion_tokens is not None:
        return request.max_completion_tokens
    return request.max_tokens


# ANCHOR: sampling_params_for
def sampling_params_for(
    request: CompletionRequest | ChatCompletionRequest, prompt_tokens: int, context_length: int, defaults: SamplingParams
) -> SamplingParams:
    """The request's SamplingParams; APIError(400) when the prompt or max_tokens cannot fit the context.

    A prompt must leave room for at least one new token, else it is refused
    (code "context_length_exceeded", param "messages" for a chat, "prompt" for
    a completion). A max_tokens (chat: max_completion_tokens when given, see
    max_tokens_asked) that does not fit next to the prompt is refused (code
    "context_length_exceeded", param "max_tokens"), as OpenAI does; no
    max_tokens means the server's default, cut to the room left. Every field
    the client sent reaches the params: the PASSED_THROUGH ones, `stop` and
    logprobs (requested_logprobs); fields left out (None) keep the defaults.
    """
    # Idea: first what fits in the context, then copy over only what the client actually sent.
    # Stuck? `miniyaie hint 6.5` prints hints, one level at a time.
    # TODO(Task 6.5): Sampling parameters from a request. Replace this line with your code.
    raise NotImplementedError('Chapter 6, Task 5: Sampling parameters from a request — see book/src/ch06_api.md')
# ANCHOR_END: sampling_params_for
