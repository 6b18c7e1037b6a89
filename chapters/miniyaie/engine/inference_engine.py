"""InferenceEngine: text in, text out, for scripts (sync), servers (async) and terminals (streams).

One background thread owns the LLMEngine and runs its step loop
(engine_loop.py); the per-request work of turning tokens into text lives
in request_state.py. This file is the front door: every entry point makes
a request, submits it, and reads its answers from its sink (sink.py),
through the two readers of submission.py:

    stream / stream_async            every CompletionDelta, then the GenerationOutput
    generate, generate_async         the GenerationOutput alone
    generate_text, generate_stream*  just the text
    chat_completion*                 OpenAI-shaped dicts (chat.py)
    prepare / submit_prepared        the slow half on a worker thread, then a quick submit (prepared.py; servers)

Closing a stream before its end aborts its request.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import replace
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import torch

from miniyaie.engine.adapters import ModelAdapter
from miniyaie.engine.chat import ChatMixin
from miniyaie.engine.config import EngineConfig
from miniyaie.engine.engine_loop import EngineLoop
from miniyaie.engine.llm_engine import LLMEngine
from miniyaie.engine.loading import display_name, load_model, start_tensor_parallel
from miniyaie.engine.outputs import CompletionDelta, GenerationOutput
from miniyaie.engine.plugins import SETTINGS_FILE, SPECULATIVE, STRUCTURED_OUTPUT, available, plugin
from miniyaie.engine.prepared import Preparation
from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.engine.submission import Submission
from miniyaie.model import LoadedModel


class InferenceEngine(Submission, Preparation, ChatMixin):
    """The public engine. See `miniyaie.engine`'s docstring for the API at a glance."""

    def __init__(
        self,
        model: str | Path | LoadedModel | None = "smollm2",
        config: EngineConfig | None = None,
        *,
        sampling_defaults: SamplingParams | None = None,
        adapters: Sequence[ModelAdapter] = (),
        device: str | None = None,
        dtype: torch.dtype | None = None,
        model_name: str | None = None,
        speculative: str | None = None,
        num_speculative_tokens: int | None = None,
        draft_model: str | Path | LoadedModel | None = None,
        quantization: str | None = None,
        kv_cache_dtype: str | None = None,
        lora_adapters: dict[str, str] | None = None,
        max_lora_rank: int | None = None,
        max_loras: int | None = None,
    ):
        """`speculative` ("ngram" or "draft"), `num_speculative_tokens` and `draft_model` (a path, a hub id or a
        loaded model sharing the target's tokenizer) set those fields of `config` (chapter 9); `quantization`
        ("int8", "int4", "gguf", ...) sets config.quantization (chapter 10), `kv_cache_dtype` config.kv_cache_dtype;
        `lora_adapters` (name -> PEFT directory), `max_lora_rank` and `max_loras` those of chapter 11 (a request
        then picks an adapter by name: generate(..., adapter="name"))."""
        given = {"quantization": quantization, "kv_cache_dtype": kv_cache_dtype, "lora_adapters": lora_adapters,
                 "max_lora_rank": max_lora_rank, "max_loras": max_loras}
        config = replace(config or EngineConfig(), **{name: value for name, value in given.items() if value is not None})
        if speculative is not None or num_speculative_tokens is not None or draft_model is not None:  # chapter 9's keywords
            config = plugin(SPECULATIVE).with_speculation(config, speculative, num_speculative_tokens, draft_model)
        self._tensor_parallel = None
        if config.tensor_parallel_size > 1:
            self.loaded, self._tensor_parallel = start_tensor_parallel(model, config, device, dtype)
        else:
            self.loaded = load_model(model, config, device, dtype)
        self.tokenizer = self.loaded.tokenizer
        self.eos_token_ids = list(self.loaded.eos_token_ids)
        self.model_name = model_name or display_name(model, self.loaded)
        self.sampling_defaults = sampling_defaults or SamplingParams()
        self.adapters = list(adapters)
        try:
            draft = None
            if config.speculative == "draft":  # chapter 9's proposer: a smaller model
                source = draft_model if isinstance(draft_model, LoadedModel) else config.draft_model
                draft = plugin(SPECULATIVE).load_draft_model(source, self.loaded, config, device, dtype)
            self.llm = LLMEngine(self.loaded.model, config, vocabulary=self._vocabulary, draft_model=draft)
            if self._tensor_parallel is not None:
                self._tensor_parallel.attach(self.llm, config.attention_backend)
        except BaseException:
            if self._tensor_parallel is not None:
                self._tensor_parallel.close()
            raise
        self._loop = EngineLoop(self.llm, self.tokenizer, self.eos_token_ids)

    @classmethod
    def from_config_file(cls, path: str | Path, **overrides) -> InferenceEngine:
        """An engine from a YAML/TOML file (read by the settings_file plugin, miniyaie/serving/config_file.py);
        keyword arguments override it."""
        settings = plugin(SETTINGS_FILE)(path)
        dtype = getattr(torch, settings.dtype) if settings.dtype else None
        kwargs = dict(model=settings.model or "smollm2", config=settings.engine, sampling_defaults=settings.sampling,
                      device=settings.device, dtype=dtype)
        return cls(**{**kwargs, **overrides})

    # ================================================================ the public API
    # ANCHOR: generate
    def generate(
        self, prompts: str | Sequence[str], sampling_params: SamplingParams | None = None, **kwargs
    ) -> GenerationOutput | list[GenerationOutput]:
        """Run prompts to completion, all in flight together. One prompt in, one result out; a list in,
        a list out, in prompt order.

        Every prompt is checked before any is submitted (a bad one raises, and none runs). If
        reading a result raises (a request failed, or the caller was interrupted: any
        BaseException), every request of the call is aborted, so none runs on for nobody,
        and the exception goes on up.
        """
        single = isinstance(prompts, str)
        items = [prompts] if single else list(prompts)
        if not items:
            return []
        params = self._params(sampling_params, kwargs)
        # Idea: check every prompt, submit them together, and never leave a request nobody will read.
        # Stuck? `miniyaie hint 5.15` prints hints, one level at a time.
        # TODO(Task 5.15): The front door. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 15: The front door — see book/src/ch05_engine_loop.md')
    # ANCHOR_END: generate

    def generate_text(self, prompts: str | Sequence[str], sampling_params: SamplingParams | None = None, **kwargs) -> str | list[str]:
        """Just the text of completion 0 of each prompt (for callers that want nothing else)."""
        results = self.generate(prompts, sampling_params, **kwargs)
        return results.text if isinstance(results, GenerationOutput) else [r.text for r in results]

    def generate_stream(
        self, prompt: str, sampling_params: SamplingParams | None = None, *, request_id: str | None = None, **kwargs
    ) -> Iterator[str]:
        """Yield text deltas as they are decided; stopping the iteration aborts the request."""
        for item in self.stream(prompt, sampling_params, request_id=request_id, **kwargs):
            if isinstance(item, CompletionDelta) and item.text:
                yield item.text

    def stream(
        self, prompt: str, sampling_params: SamplingParams | None = None, *, request_id: str | None = None,
        prompt_token_ids: list[int] | None = None, **kwargs
    ) -> Iterator[CompletionDelta | GenerationOutput]:
        """Every CompletionDelta of the request (all n completions), then its GenerationOutput."""
        request = self._submit(prompt, self._params(sampling_params, kwargs), request_id, prompt_token_ids)
        yield from self._follow(request)

    async def generate_async(
        self, prompt: str, sampling_params: SamplingParams | None = None, *, request_id: str | None = None, **kwargs
    ) -> GenerationOutput:
        """Await one prompt's result; cancelling the awaiting task aborts the request."""
        request = self._submit(prompt, self._params(sampling_params, kwargs), request_id, deltas=False)
        return await self._result_async(request)

    async def generate_stream_async(
        self, prompt: str, sampling_params: SamplingParams | None = None, *, request_id: str | None = None, **kwargs
    ) -> AsyncIterator[str]:
        """Async text deltas; closing the iterator (a client that went away) aborts the request."""
        async for item in self.stream_async(prompt, sampling_params, request_id=request_id, **kwargs):
            if isinstance(item, CompletionDelta) and item.text:
                yield item.text

    async def stream_async(
        self, prompt: str, sampling_params: SamplingParams | None = None, *, request_id: str | None = None,
        prompt_token_ids: list[int] | None = None, **kwargs
    ) -> AsyncIterator[CompletionDelta | GenerationOutput]:
        """Async version of `stream`: CompletionDeltas, then the GenerationOutput."""
        request = self._submit(prompt, self._params(sampling_params, kwargs), request_id, prompt_token_ids)
        async with aclosing(self._follow_async(request)) as items:  # closing this stream closes (aborts) that one
            async for item in items:
                yield item

    def abort(self, request_id: str) -> bool:
        """Cancel a request from any thread; True if it was in flight. Its caller gets finish_reason "abort"."""
        return self._loop.abort(request_id)

    # ---------------------------------------------------------------- checks at the door (for servers)
    @property
    def context_length(self) -> int:
        """The model's context in tokens (prompt + output)."""
        return self.llm.model.config.max_position_embeddings

    def encode(self, prompt: str) -> list[int]:
        """A plain prompt's token ids, adapters applied (what generate() would submit)."""
        return self._encode(prompt)

    def check_request(self, prompt_token_ids: Sequence[int], sampling_params: SamplingParams | None = None, **kwargs) -> SamplingParams:
        """Raise what submitting this request would raise, changing nothing; its SamplingParams.

        A structured request's pattern is compiled here (up to its time budget): call it off any
        event loop. A server uses prepare (prepared.py) instead, which also holds the compiled
        pattern for the submission and can be cancelled.
        """
        params = self._params(sampling_params, kwargs)
        self.llm.check_request(list(prompt_token_ids), params)
        return params

    # ---------------------------------------------------------------- stats and lifetime
    def get_stats(self) -> dict:
        """Counters of the whole engine life (see the book, chapter 5, for each one)."""
        structured = self.llm.constraints.stats() if available(STRUCTURED_OUTPUT) else {}  # chapter 8's index cache
        return {**self._loop.stats(), "structured_output": structured}

    def adapter_names(self) -> list[str]:
        """The LoRA adapters a request may name (chapter 11's lora_adapters), in the order they were given."""
        return list(self.llm.config.lora_adapters)

    @property
    def speculative_method(self) -> str | None:
        """The speculative decoding this engine runs (chapter 9: "ngram" or "draft"), or None."""
        return self.llm.config.speculative

    def check_health(self) -> None:
        """Raise EngineError, saying why, if the engine can no longer serve (closed, or its loop stopped)."""
        self._loop.check_running()
        self.llm.runner.check_health()

    def compile_in_process(self, new_compiler: Callable[[], object]) -> None:
        """Compile structured-output patterns in the workers `new_compiler()` gives, not on the calling thread (a
        server's choice: a compile then holds no GIL the engine thread and the event loop need; chapter 8, if installed)."""
        if available(STRUCTURED_OUTPUT):
            self.llm.constraints.compile_in_process(new_compiler)

    def close_compile_workers(self) -> None:
        """Kill the compile worker processes now (a server stopping); compile_in_process starts afresh."""
        if available(STRUCTURED_OUTPUT):
            self.llm.constraints.close()

    def close(self) -> None:
        """Stop the loop thread (requests still in flight end with an EngineError), any compile workers, then the other ranks."""
        self._loop.close()
        self.llm.wait_for_model()  # with overlap scheduling a step may still be running: nothing outlives close()
        self.close_compile_workers()
        if self._tensor_parallel is not None:
            self._tensor_parallel.close()
            self._tensor_parallel = None

    def __enter__(self) -> InferenceEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _vocabulary(self):
        """The tokenizer's tokens as bytes, for structured output (chapter 8's plugin); made on the first such request."""
        return plugin(STRUCTURED_OUTPUT).vocabulary(self.tokenizer, self.eos_token_ids)
