"""Chat in OpenAI's shape: a conversation becomes a prompt (chat template, adapters), then runs like any prompt.

A part of InferenceEngine (it inherits these methods): each one renders the
messages and hands the prompt to the engine's one way in (`_submit`), then
shapes the answer as OpenAI's `chat.completion` or `chat.completion.chunk`
dicts (miniyaie.openai_format).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing

from miniyaie import openai_format
from miniyaie.engine.errors import InvalidRequestError
from miniyaie.engine.sampling_params import SamplingParams


class ChatMixin:
    def chat_completion(self, messages: list[dict], sampling_params: SamplingParams | None = None, **kwargs) -> dict:
        """An OpenAI `chat.completion` dict for the conversation."""
        prompt, ids = self.render_chat(messages)
        request = self._submit(prompt, self._params(sampling_params, kwargs), openai_format.completion_id(), ids, deltas=False)
        return openai_format.chat_completion(self._result(request), self.model_name)

    def chat_completion_stream(
        self, messages: list[dict], sampling_params: SamplingParams | None = None, *, include_usage: bool = False, **kwargs
    ) -> Iterator[dict]:
        """OpenAI `chat.completion.chunk` dicts: a role chunk per choice, content deltas, the finish reasons."""
        prompt, ids = self.render_chat(messages)
        params = self._params(sampling_params, kwargs)
        chunks = openai_format.ChatChunker(openai_format.completion_id(), self.model_name, params.n, include_usage)
        for item in self._follow(self._submit(prompt, params, chunks.request_id, ids)):
            yield from chunks.feed(item)

    async def chat_completion_async(self, messages: list[dict], sampling_params: SamplingParams | None = None, **kwargs) -> dict:
        prompt, ids = self.render_chat(messages)
        request = self._submit(prompt, self._params(sampling_params, kwargs), openai_format.completion_id(), ids, deltas=False)
        return openai_format.chat_completion(await self._result_async(request), self.model_name)

    async def chat_completion_stream_async(
        self, messages: list[dict], sampling_params: SamplingParams | None = None, *, include_usage: bool = False, **kwargs
    ) -> AsyncIterator[dict]:
        prompt, ids = self.render_chat(messages)
        params = self._params(sampling_params, kwargs)
        chunks = openai_format.ChatChunker(openai_format.completion_id(), self.model_name, params.n, include_usage)
        async with aclosing(self._follow_async(self._submit(prompt, params, chunks.request_id, ids))) as items:
            async for item in items:
                for chunk in chunks.feed(item):
                    yield chunk

    def render_chat(self, messages: list[dict]) -> tuple[str, list[int]]:
        """The prompt text and token ids of a conversation (adapters applied, chat template, generation prompt)."""
        try:
            messages = openai_format.check_messages(messages)
        except openai_format.MessageError as exc:
            raise InvalidRequestError(str(exc)) from None
        for adapter in self.adapters:
            messages = adapter.prepare_messages(messages)
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequestError(f"model {self.model_name!r} has no chat template; use generate()")
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return text, list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
