"""The request bodies of the OpenAI API as pydantic models: types and ranges checked at the door.

Strict mode: a string where a number belongs is an error, not a guess.
Unknown fields are refused (as OpenAI does), so a typo never silently
becomes a default. Every string must be valid Unicode (JSON can carry a
lone surrogate, "\ud800", that no tokenizer encodes). The same models
produce the OpenAPI schema at `/openapi.json`, which the tests fuzz.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, field_validator

from miniyaie.openai_format import check_text, content_text
from miniyaie.engine.sampling_params import MAX_LOGPROBS, MAX_N, MAX_STOP_STRING_LENGTH, MAX_STOP_STRINGS

Role = Literal["system", "user", "assistant", "tool", "developer"]
MAX_PROMPTS = 16  # prompts in one /v1/completions batch
MAX_STOP_TOKEN_IDS = 64  # every step checks each sampled token against them, and masks them under min_tokens


def _valid_unicode(value):
    """A string must be valid Unicode before anything else reads it; other types are left to the type check."""
    return check_text(value, "the text") if isinstance(value, str) else value


Text = Annotated[str, BeforeValidator(_valid_unicode)]
StopString = Annotated[Annotated[str, StringConstraints(min_length=1, max_length=MAX_STOP_STRING_LENGTH)],
                       BeforeValidator(_valid_unicode)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: bool = False


class ChatMessage(_Strict):
    role: Role
    content: str | list[dict[str, Any]]  # a string, or OpenAI's content parts: text parts are joined
    name: Text | None = None

    @field_validator("content")
    @classmethod
    def _one_text(cls, content: str | list[dict[str, Any]]) -> str:
        return content_text(content)


class JsonSchemaFormat(_Strict):
    """OpenAI's response_format.json_schema: a named schema the output must follow."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    name: Text | None = None
    description: Text | None = None
    schema_: dict[str, Any] = Field(..., alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    """OpenAI's response_format: plain text, any JSON object, or JSON following a schema (chapter 8)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputs(_Strict):
    """vLLM's structured_outputs: one of a regex, a JSON schema or a list of choices."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    regex: Text | None = None
    json_: dict[str, Any] | Text | None = Field(None, alias="json")
    choice: list[Text] | None = None


# ANCHOR: generation_request
class _GenerationRequest(_Strict):
    """What both endpoints share: the model, sampling and stopping."""

    model: Text
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)] | None = None
    seed: int | None = Field(None, ge=0, lt=2**63)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    user: Text | None = None
    # extensions beyond OpenAI (vLLM has the same names)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=10)
    min_tokens: int | None = Field(None, ge=0)
    ignore_eos: bool | None = None
    stop_token_ids: Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=MAX_STOP_TOKEN_IDS)] | None = None
    # structured output (chapter 8): OpenAI's response_format, vLLM's structured_outputs and guided_* names
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_regex: Text | None = None
    guided_json: dict[str, Any] | Text | None = None
    guided_choice: list[Text] | None = None
# ANCHOR_END: generation_request


class CompletionRequest(_GenerationRequest):
    """POST /v1/completions: continue a prompt (no chat template)."""

    prompt: Text | Annotated[list[Text], Field(min_length=1, max_length=MAX_PROMPTS)] | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)


class ChatCompletionRequest(_GenerationRequest):
    """POST /v1/chat/completions: the chat template is applied on the server."""

    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)


def prompts_of(request: CompletionRequest) -> list[str | list[int]]:
    """The prompts of a completion request: a string, a batch of strings, or one list of token ids."""
    prompt = request.prompt
    if isinstance(prompt, str):
        return [prompt]
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    return list(prompt)
