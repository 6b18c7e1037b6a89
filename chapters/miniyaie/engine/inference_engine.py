"""InferenceEngine: text in, text out, for scripts (sync), servers (async) and terminals (streams).

One background thread owns the LLMEngine and runs its step loop; nothing
else touches it. Callers talk to that thread through an inbox (submit,
abort) and each request answers through its own sink: a `queue.Queue` for
synchronous callers, an `asyncio.Queue` filled with `call_soon_threadsafe`
for async ones. The loop sleeps on a condition variable when there is no
work (no busy-waiting) and is woken by the next submission.

    caller ── submit ──> inbox ──> loop thread: LLMEngine.step() ─┐
       ^                                                           │ tokens
       └──── deltas / result / error <── sink <── detokenize, stop strings

A step that raises fails the requests in flight with RequestFailedError
(each caller sees it; their blocks are returned) and the loop goes on.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from miniyaie.engine import openai_format
from miniyaie.engine.adapters import ModelAdapter
from miniyaie.engine.backends import prepare_backend
from miniyaie.engine.config import EngineConfig
from miniyaie.engine.detokenizer import IncrementalDetokenizer
from miniyaie.engine.errors import EngineError, InvalidRequestError, ModelLoadError, RequestFailedError
from miniyaie.engine.llm_engine import LLMEngine, RequestEvent, child_request_id
from miniyaie.engine.outputs import CompletionDelta, CompletionOutput, GenerationOutput, TokenLogprob
from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.engine.stop_strings import StopStringFilter
from miniyaie.engine.token_text import token_logprob
from miniyaie.model import LoadedModel, load
from miniyaie.model import ModelLoadError as ChapterZeroModelLoadError

log = logging.getLogger("miniyaie.engine")
Sink = Callable[[object], None]  # receives CompletionDelta, then a GenerationOutput or an EngineError


@dataclass
class _Completion:
    """Loop-thread state of one completion."""

    engine_id: str  # its id in the LLMEngine
    index: int
    detokenizer: IncrementalDetokenizer
    stops: StopStringFilter
    output: CompletionOutput


@dataclass
class _Request:
    request_id: str
    prompt: str
    prompt_token_ids: list[int]
    params: SamplingParams
    sink: Sink
    stream: bool
    completions: list[_Completion] = field(default_factory=list)
    scheduled: object = None  # the scheduler's Request (its num_cached_tokens)

    def result(self) -> GenerationOutput:
        cached = getattr(self.scheduled, "num_cached_tokens", 0)
        return GenerationOutput(self.request_id, self.prompt, self.prompt_token_ids, [c.output for c in self.completions], cached)


class InferenceEngine:
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
    ):
        if not isinstance(model, LoadedModel):  # a CPU triton backend must set up Triton before the load imports it
            prepare_backend((config or EngineConfig()).attention_backend, device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.loaded = model if isinstance(model, LoadedModel) else _load(model, device, dtype)
        self.tokenizer = self.loaded.tokenizer
        self.eos_token_ids = list(self.loaded.eos_token_ids)
        self.model_name = model_name or _display_name(model, self.loaded)
        self.sampling_defaults = sampling_defaults or SamplingParams()
        self.adapters = list(adapters)
        self.llm = LLMEngine(self.loaded.model, config or EngineConfig())
        self._wake = threading.Condition()
        self._inbox: list[tuple] = []
        self._requests: dict[str, _Request] = {}  # in flight, by request id (guarded by _wake)
        self._by_engine_id: dict[str, tuple[_Request, _Completion]] = {}  # loop thread only
        self._closed = False
        self._started = time.monotonic()
        self._busy_seconds = 0.0
        self._failed_steps = 0
        self._thread = threading.Thread(target=self._loop, name="miniyaie-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_config_file(cls, path: str | Path, **overrides) -> InferenceEngine:
        """An engine from a YAML/TOML file (see engine/config_file.py); keyword arguments override it."""
        from miniyaie.engine.config_file import load_settings

        settings = load_settings(path)
        dtype = getattr(torch, settings.dtype) if settings.dtype else None
        kwargs = dict(model=settings.model or "smollm2", config=settings.engine, sampling_defaults=settings.sampling,
                      device=settings.device, dtype=dtype)
        return cls(**{**kwargs, **overrides})

    # ================================================================ the public API
    def generate(
        self, prompts: str | Sequence[str], sampling_params: SamplingParams | None = None, **kwargs
    ) -> GenerationOutput | list[GenerationOutput]:
        """Run prompts to completion (batched together). One prompt in, one result out; a list in, a list out."""
        single = isinstance(prompts, str)
        items = [prompts] if single else list(prompts)
        if not items:
            return []
        params = self._params(sampling_params, kwargs)
        sinks = [queue.Queue() for _ in items]
        requests = [self._request(self._encode(p), p, params, sink.put, stream=False) for p, sink in zip(items, sinks)]
        self._submit(requests)
        results = [self._finish(_get(sink, self._thread)) for sink in sinks]
        return results[0] if single else results

    def generate_text(self, prompts: str | Sequence[str], sampling_params: SamplingParams | None = None, **kwargs) -> str | list[str]:
        """The seeds' convenience: just the text of completion 0 of each prompt."""
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
        params = self._params(sampling_params, kwargs)
        sink: queue.Queue = queue.Queue()
        ids = prompt_token_ids if prompt_token_ids is not None else self._encode(prompt)
        request = self._request(ids, prompt, params, sink.put, stream=True, request_id=request_id)
        self._submit([request])
        done = False
        try:
            while True:
                item = _get(sink, self._thread)
                if isinstance(item, GenerationOutput):
                    done = True
                    yield self._finish(item)
                    return
                yield item
        finally:
            if not done:
                self.abort(request.request_id)

    async def generate_async(
        self, prompt: str, sampling_params: SamplingParams | None = None, *, request_id: str | None = None, **kwargs
    ) -> GenerationOutput:
        """Await one prompt's result; cancelling the awaiting task aborts the request."""
        result = None
        async for item in self.stream_async(prompt, sampling_params, request_id=request_id, _deltas=False, **kwargs):
            result = item
        return result

    async def generate_stream_async(
        self, prompt: str, sampling_params: SamplingParams | None = None, *, request_id: str | None = None, **kwargs
    ) -> AsyncIterator[str]:
        """Async text deltas; closing the iterator (a client that went away) aborts the request."""
        async for item in self.stream_async(prompt, sampling_params, request_id=request_id, **kwargs):
            if isinstance(item, CompletionDelta) and item.text:
                yield item.text

    async def stream_async(
        self, prompt: str, sampling_params: SamplingParams | None = None, *, request_id: str | None = None,
        prompt_token_ids: list[int] | None = None, _deltas: bool = True, **kwargs
    ) -> AsyncIterator[CompletionDelta | GenerationOutput]:
        """Async version of `stream`: CompletionDeltas, then the GenerationOutput."""
        params = self._params(sampling_params, kwargs)
        loop = asyncio.get_running_loop()
        sink: asyncio.Queue = asyncio.Queue()

        def put(item):  # runs on the engine thread
            loop.call_soon_threadsafe(sink.put_nowait, item)

        ids = prompt_token_ids if prompt_token_ids is not None else self._encode(prompt)
        request = self._request(ids, prompt, params, put, stream=_deltas, request_id=request_id)
        self._submit([request])
        done = False
        try:
            while True:
                item = await _get_async(sink, self._thread)
                if isinstance(item, GenerationOutput):
                    done = True
                    yield self._finish(item)
                    return
                yield item
        finally:
            if not done:
                self.abort(request.request_id)

    def abort(self, request_id: str) -> bool:
        """Cancel a request from any thread; True if it was in flight. Its caller gets finish_reason "abort"."""
        with self._wake:
            known = request_id in self._requests
            if known:
                self._inbox.append(("abort", request_id))
                self._wake.notify()
        return known

    # ---------------------------------------------------------------- chat (OpenAI-shaped)
    def chat_completion(self, messages: list[dict], sampling_params: SamplingParams | None = None, **kwargs) -> dict:
        """An OpenAI `chat.completion` dict for the conversation."""
        prompt, ids = self.render_chat(messages)
        params = self._params(sampling_params, kwargs)
        result = None
        for item in self.stream(prompt, params, request_id=openai_format.completion_id(), prompt_token_ids=ids):
            result = item
        return openai_format.chat_completion(result, self.model_name)

    def chat_completion_stream(
        self, messages: list[dict], sampling_params: SamplingParams | None = None, *, include_usage: bool = False, **kwargs
    ) -> Iterator[dict]:
        """OpenAI `chat.completion.chunk` dicts: a role chunk per choice, content deltas, the finish reasons."""
        prompt, ids = self.render_chat(messages)
        params = self._params(sampling_params, kwargs)
        chunks = openai_format.ChatChunker(openai_format.completion_id(), self.model_name, params.n, include_usage)
        for item in self.stream(prompt, params, request_id=chunks.request_id, prompt_token_ids=ids):
            yield from chunks.feed(item)

    async def chat_completion_async(self, messages: list[dict], sampling_params: SamplingParams | None = None, **kwargs) -> dict:
        prompt, ids = self.render_chat(messages)
        params = self._params(sampling_params, kwargs)
        result = None
        async for item in self.stream_async(prompt, params, request_id=openai_format.completion_id(), prompt_token_ids=ids, _deltas=False):
            result = item
        return openai_format.chat_completion(result, self.model_name)

    async def chat_completion_stream_async(
        self, messages: list[dict], sampling_params: SamplingParams | None = None, *, include_usage: bool = False, **kwargs
    ) -> AsyncIterator[dict]:
        prompt, ids = self.render_chat(messages)
        params = self._params(sampling_params, kwargs)
        chunks = openai_format.ChatChunker(openai_format.completion_id(), self.model_name, params.n, include_usage)
        async for item in self.stream_async(prompt, params, request_id=chunks.request_id, prompt_token_ids=ids):
            for chunk in chunks.feed(item):
                yield chunk

    def render_chat(self, messages: list[dict]) -> tuple[str, list[int]]:
        """The prompt text and token ids of a conversation (adapters applied, chat template, generation prompt)."""
        messages = openai_format.check_messages(messages)
        for adapter in self.adapters:
            messages = adapter.prepare_messages(messages)
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequestError(f"model {self.model_name!r} has no chat template; use generate()")
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return text, list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

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

        A server calls it before it answers "200 OK" and starts streaming, so
        that a bad or impossible request still gets a 4xx.
        """
        params = self._params(sampling_params, kwargs)
        self.llm.check_request(list(prompt_token_ids), params)
        return params

    # ---------------------------------------------------------------- stats and lifetime
    def get_stats(self) -> dict:
        """Counters of the whole engine life (see the book, chapter 5, for each one)."""
        c = self.llm.stats
        with self._wake:
            in_flight = len(self._requests)
        prompt_tokens = c["prompt_tokens"]
        return {
            "requests": {"waiting": c["num_waiting"], "running": c["num_running"], "in_flight": in_flight,
                         "finished": c["finished_requests"]},
            "tokens": {"prompt": prompt_tokens, "output": c["output_tokens"], "computed": c["computed_tokens"],
                       "cached_prompt": c["cached_tokens"]},
            "prefix_cache_hit_rate": c["cached_tokens"] / prompt_tokens if prompt_tokens else 0.0,
            "kv_blocks": {"used": c["used_blocks"], "held_by_requests": c["request_blocks"],
                          "cache_only": c["used_blocks"] - c["request_blocks"], "total": self.llm.memory.num_blocks, "max_used": c["max_used_blocks"],
                          "block_size": self.llm.memory.block_size},
            "preemptions": c["num_preemptions"],
            "forked_requests": c["forked_requests"],
            "steps": c["steps"],
            "failed_steps": self._failed_steps,
            "busy_seconds": self._busy_seconds,
            "uptime_seconds": time.monotonic() - self._started,
            "output_tokens_per_second": c["output_tokens"] / self._busy_seconds if self._busy_seconds else 0.0,
        }

    def close(self) -> None:
        """Stop the loop thread; requests still in flight end with an EngineError."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()

    def __enter__(self) -> InferenceEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ================================================================ caller side
    def _params(self, sampling_params: SamplingParams | None, overrides: dict) -> SamplingParams:
        base = SamplingParams.coerce(sampling_params) if sampling_params is not None else self.sampling_defaults
        return base.with_updates(**overrides) if overrides else base

    def _encode(self, prompt: str) -> list[int]:
        if not isinstance(prompt, str):
            raise InvalidRequestError(f"a prompt must be a string, got {type(prompt).__name__}")
        for adapter in self.adapters:
            prompt = adapter.prepare_prompt(prompt)
        return list(self.tokenizer(prompt)["input_ids"])

    def _request(self, ids, prompt, params, sink, stream, request_id=None) -> _Request:
        self.llm.check_request(ids, params)  # raises here, in the caller, before anything changes
        request_id = request_id or f"req-{uuid.uuid4().hex[:16]}"
        return _Request(request_id, prompt, list(ids), params, sink, stream)

    def _submit(self, requests: list[_Request]) -> None:
        with self._wake:
            if self._closed:
                raise EngineError("the engine is closed")
            for r in requests:
                if r.request_id in self._requests:
                    raise InvalidRequestError(f"request id {r.request_id!r} is already in use")
            ids = [r.request_id for r in requests]
            if len(set(ids)) != len(ids):
                raise InvalidRequestError("request ids must be unique")
            self._requests.update((r.request_id, r) for r in requests)
            self._inbox.append(("submit", requests))
            self._wake.notify()

    def _finish(self, result: GenerationOutput) -> GenerationOutput:
        for adapter in self.adapters:
            result = adapter.process_output(result)
        return result

    # ================================================================ the loop thread
    # ANCHOR: loop
    def _loop(self) -> None:
        while True:
            with self._wake:
                while not (self._inbox or self._closed or self.llm.has_unfinished()):
                    self._wake.wait()  # sleeps until submit/abort/close notifies
                if self._closed:
                    break
                inbox, self._inbox = self._inbox, []
            for kind, payload in inbox:
                self._add(payload) if kind == "submit" else self._abort(payload)
            if not self.llm.has_unfinished():
                continue
            started = time.perf_counter()
            try:
                events = self.llm.step()
                self._busy_seconds += time.perf_counter() - started
                self._on_events(events)
            except Exception as exc:  # the step failed: fail its requests, keep serving
                self._fail_in_flight(exc)
        self._fail_in_flight(EngineError("the engine was closed"))
    # ANCHOR_END: loop

    def _add(self, requests: list[_Request]) -> None:
        added = []
        try:
            for r in requests:
                self.llm.add_request(r.prompt_token_ids, r.params, self.eos_token_ids, r.request_id)
                added.append(r)
                r.scheduled = self.llm.scheduler.requests[r.request_id]
                for index in range(r.params.n):
                    engine_id = r.request_id if index == 0 else child_request_id(r.request_id, index)
                    completion = _Completion(
                        engine_id, index, IncrementalDetokenizer(self.tokenizer, r.params.skip_special_tokens),
                        StopStringFilter(r.params.stop),
                        CompletionOutput(index, logprobs=[] if r.params.logprobs is not None else None),
                    )
                    r.completions.append(completion)
                    self._by_engine_id[engine_id] = (r, completion)
        except Exception as exc:  # refused (rare: checked in the caller already): undo the whole batch
            for r in added:
                self.llm.abort(r.request_id)
                for c in r.completions:
                    self._by_engine_id.pop(c.engine_id, None)
            error = exc if isinstance(exc, EngineError) else RequestFailedError(f"the request could not start: {type(exc).__name__}: {exc}")
            if error is not exc:
                error.__cause__ = exc
                log.error("adding requests failed", exc_info=exc)
            self._end_with_error(requests, error)

    def _abort(self, request_id: str) -> None:
        with self._wake:
            request = self._requests.get(request_id)
        if request is None:
            return
        self.llm.abort(request_id)
        for c in request.completions:
            if c.output.finish_reason is None:
                self._emit(request, c, [], c.detokenizer.finish(), "abort")

    def _on_events(self, events: list[RequestEvent]) -> None:
        for event in events:
            request, completion = self._by_engine_id[event.request_id]
            logprob = None
            if completion.output.logprobs is not None:
                logprob = self._token_logprob(event)
            text = completion.detokenizer.push([event.token_id])
            if event.finish_reason is not None:
                text += completion.detokenizer.finish()
            self._emit(request, completion, [event.token_id], text, event.finish_reason, logprob)

    # ANCHOR: emit
    def _emit(self, request: _Request, c: _Completion, token_ids: list[int], text: str, finish: str | None,
              logprob: TokenLogprob | None = None) -> None:
        """Record a completion's new tokens and text; stop strings cut it; tell the caller."""
        # Hint: `shown` is the text the caller may see: pass `text` through
        # c.stops (push). If a stop string appeared, the completion ends now
        # with "stop": when the engine had not finished it anyway, end it
        # with self.llm.finish(c.engine_id) so its blocks come back this step.
        # Otherwise, when the completion finishes, release the held-back tail
        # (flush). Then append token_ids, shown and the logprob (if any) to
        # c.output; on finish set c.output.finish_reason and forget
        # c.engine_id in self._by_engine_id.
        # TODO(Task 5.6): The request lifecycle. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 6: The request lifecycle — see book/src/ch05_engine.md')
        if request.stream:
            self._send(request, CompletionDelta(request.request_id, c.index, shown, token_ids, finish,
                                                [logprob] if logprob is not None else None))
        if all(x.output.finish_reason is not None for x in request.completions):
            with self._wake:
                self._requests.pop(request.request_id, None)
            self._send(request, request.result())
    # ANCHOR_END: emit

    def _token_logprob(self, event: RequestEvent) -> TokenLogprob:
        return token_logprob(self.tokenizer, event.token_id, event.logprob, event.top_logprobs or [])

    def _send(self, request: _Request, item) -> None:
        try:
            request.sink(item)
        except RuntimeError:  # an async caller's event loop is gone: nobody will read this request
            log.warning("request %s: its caller went away; aborting it", request.request_id)
            self.llm.abort(request.request_id)
            for c in request.completions:
                self._by_engine_id.pop(c.engine_id, None)
            with self._wake:
                self._requests.pop(request.request_id, None)

    def _fail_in_flight(self, exc: BaseException) -> None:
        with self._wake:
            requests = list(self._requests.values())
            pending = [r for kind, payload in self._inbox if kind == "submit" for r in payload]
            self._inbox = [item for item in self._inbox if item[0] != "submit"]
        if not isinstance(exc, EngineError) or isinstance(exc, RequestFailedError):
            self._failed_steps += 1
            log.error("engine step failed; failing %d request(s)", len(requests), exc_info=exc)
        for r in requests:
            self.llm.abort(r.request_id)
            for c in r.completions:
                self._by_engine_id.pop(c.engine_id, None)
        error = exc if isinstance(exc, EngineError) else RequestFailedError(f"the engine step failed: {type(exc).__name__}: {exc}")
        if error is not exc:
            error.__cause__ = exc
        self._end_with_error(requests + [r for r in pending if r not in requests], error)

    def _end_with_error(self, requests: list[_Request], error: EngineError) -> None:
        with self._wake:
            for r in requests:
                self._requests.pop(r.request_id, None)
        for r in requests:
            try:
                r.sink(error)
            except RuntimeError:
                pass  # its event loop is gone: nobody is waiting for this error



def _get(sink: queue.Queue, thread: threading.Thread):
    """The next item for a synchronous caller; an EngineError if the loop thread is gone (never hangs)."""
    while True:
        try:
            return _raise_if_error(sink.get(timeout=1.0))
        except queue.Empty:
            if not thread.is_alive():
                raise EngineError("the engine loop has stopped") from None


async def _get_async(sink: asyncio.Queue, thread: threading.Thread):
    while True:
        try:
            return _raise_if_error(await asyncio.wait_for(sink.get(), timeout=1.0))
        except asyncio.TimeoutError:
            if not thread.is_alive():
                raise EngineError("the engine loop has stopped") from None


def _raise_if_error(item):
    if isinstance(item, BaseException):
        raise item
    return item


def _load(model, device: str | None, dtype: torch.dtype | None) -> LoadedModel:
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
    try:
        return load(None if model is None else str(model), dtype=dtype, device=device)
    except ChapterZeroModelLoadError as exc:
        raise ModelLoadError(str(exc)) from exc


def _display_name(model, loaded: LoadedModel) -> str:
    if model in (None, "smollm2"):
        return "SmolLM2-135M-Instruct"
    return str(model) if not isinstance(model, LoadedModel) else loaded.path.name
