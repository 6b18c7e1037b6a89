"""A request prepared off the caller's event loop, then submitted in one quick step.

Admitting a request has a slow half (tokenizing, checking, compiling a
structured-output pattern: up to its time budget) and a quick half (handing
it to the engine thread). A server must not do the slow half on its event
loop, where it would stall every other connection, so InferenceEngine
splits them:

    prepare(prompt, params, cancel=...)  any thread: encode, check, compile the pattern
                                         (held for this request: the engine thread never compiles it)
    submit_prepared([...], [ids])        the event loop: all in flight at once, a stream for each
    release(prepared)                    a prepared request that will not be submitted after all

Setting `cancel` stops a compile soon (CompileCancelled): a client that left,
a server that stops.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from miniyaie.engine.outputs import CompletionDelta, GenerationOutput
from miniyaie.engine.request_state import RequestState
from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.engine.sink import Sink


@dataclass(frozen=True)
class PreparedRequest:
    """A request checked in full whose pattern (if any) is compiled and held for its submission."""

    prompt: str
    prompt_token_ids: list[int]
    params: SamplingParams


class RequestStream:
    """A submitted request's items (CompletionDeltas, then the GenerationOutput), as an async iterator.

    aclose() aborts the request if it has not finished, even when nobody ever
    started reading it (an async generator that never started runs no
    `finally`: a client that left before its first byte would otherwise leave
    its request decoding for nobody).
    """

    def __init__(self, items, request_id: str, abort: Callable[[str], bool]):
        self._items, self.request_id, self._abort = items, request_id, abort

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> CompletionDelta | GenerationOutput:
        return await self._items.__anext__()

    async def aclose(self) -> None:
        await self._items.aclose()
        self._abort(self.request_id)  # a no-op once the request has ended


class Preparation:
    """Mixed into InferenceEngine: needs self.llm, self.tokenizer, self._loop, self._params, self._encode, self._follow_async, self.abort."""

    def prepare(self, prompt: str | None, sampling_params: SamplingParams | None = None, *,
                prompt_token_ids: Sequence[int] | None = None, cancel: threading.Event | None = None,
                **kwargs) -> PreparedRequest:
        """Encode (unless ids are given), check and compile a request without submitting it; any thread.

        `prompt` may be None when ids are given: its text is then decoded from them once they are checked.

        Raises what submitting would raise (InvalidRequestError and its kin, PatternError for a bad
        pattern), or CompileCancelled soon after `cancel` is set. A request prepared here must be
        submitted (submit_prepared) or released (release): its compiled pattern is held for it.
        """
        params = self._params(sampling_params, kwargs)
        ids = list(prompt_token_ids) if prompt_token_ids is not None else self._encode(prompt)
        self.llm.prepare_request(ids, params, cancel)
        try:
            text = prompt if prompt is not None else self.tokenizer.decode(ids)  # checked: every id is in the vocabulary
        except BaseException:
            self.llm.release_request(params)
            raise
        return PreparedRequest(text, ids, params)

    def release(self, prepared: PreparedRequest) -> None:
        """Drop what prepare holds for a request that will not be submitted (any thread)."""
        self.llm.release_request(prepared.params)

    def submit_prepared(self, prepared: Sequence[PreparedRequest], request_ids: Sequence[str | None]) -> list[RequestStream]:
        """Put prepared requests in flight, all or none, and return a stream for each (quick: no compile, no
        tokenizer, so an event loop may call it). If submitting fails, every one of them is released."""
        requests = [RequestState(rid or f"req-{uuid.uuid4().hex[:16]}", p.prompt, list(p.prompt_token_ids), p.params,
                                 Sink(lambda: self._loop.alive), True) for p, rid in zip(prepared, request_ids, strict=True)]
        try:
            self._loop.submit(requests)
        except BaseException:
            for p in prepared:
                self.release(p)
            raise
        return [RequestStream(self._follow_async(r), r.request_id, self.abort) for r in requests]
