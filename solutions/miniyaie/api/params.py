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
    # Nudge: first what fits in the context, then copy over only what the client actually sent.
    # Hint 1: Two limits come from the context: the prompt alone must leave at least one token of
    #   room (else param "messages" for chat, "prompt" for completions), and an explicit
    #   max_tokens must fit in that room (param "max_tokens"); both are 400s with code
    #   "context_length_exceeded". A field the client left out (None) must not overwrite the
    #   server's default; `stop` may be one string or a list; logprobs has two spellings.
    # Hint 2: room = context_length - prompt_tokens. Refuse room < 1. Take max_tokens_asked:
    #   None -> the default cut to room; more than room -> refuse. Then build a dict of the
    #   PASSED_THROUGH fields whose value is not None, set max_tokens, stop as a tuple when given,
    #   logprobs from requested_logprobs when not None, and apply it to the defaults.
    # Hint 3:
    #   room = context_length - prompt_tokens; if room < 1: raise APIError(400, ..., param=messages|prompt, code=...)
    #   max_tokens = max_tokens_asked(request)
    #   if max_tokens is None: max_tokens = min(defaults.max_tokens, room)
    #   elif max_tokens > room: raise APIError(400, ..., param="max_tokens", code="context_length_exceeded")
    #   fields = {name: value for name in PASSED_THROUGH if (value := getattr(request, name)) is not None}
    #   fields["max_tokens"] = max_tokens; stop -> tuple; logprobs -> requested_logprobs(request)
    #   return defaults.with_updates(**fields)
    # BEGIN SOLUTION 6.5: Sampling parameters from a request
    room = context_length - prompt_tokens
    if room < 1:
        raise APIError(400, f"the prompt has {prompt_tokens} tokens but the model's context is {context_length} tokens",
                       param="messages" if isinstance(request, ChatCompletionRequest) else "prompt",
                       code="context_length_exceeded")
    max_tokens = max_tokens_asked(request)
    if max_tokens is None:
        max_tokens = min(defaults.max_tokens, room)
    elif max_tokens > room:
        raise APIError(400, f"max_tokens is {max_tokens} but the prompt ({prompt_tokens} tokens) leaves room for "
                       f"{room} in the model's context of {context_length}", param="max_tokens",
                       code="context_length_exceeded")
    fields = {name: getattr(request, name) for name in PASSED_THROUGH if getattr(request, name) is not None}
    fields["max_tokens"] = max_tokens
    if request.stop is not None:
        fields["stop"] = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop)
    logprobs = requested_logprobs(request)
    if logprobs is not None:
        fields["logprobs"] = logprobs
    return defaults.with_updates(**fields)
    # END SOLUTION
# ANCHOR_END: sampling_params_for
