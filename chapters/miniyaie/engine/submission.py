"""How a call becomes a request in the engine loop, and how its answers come back to the caller.

Mixed into InferenceEngine: every entry point checks its prompt and
parameters here (`_request`, raising before anything changes), submits
(`_submit`) and reads the request's sink through `_follow` (threads) or
`_follow_async` (coroutines), which abort a request whose reader left
before its end.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

from miniyaie.engine.errors import InvalidRequestError
from miniyaie.openai_format.messages import MessageError, check_text
from miniyaie.engine.outputs import CompletionDelta, GenerationOutput
from miniyaie.engine.request_state import RequestState
from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.engine.sink import Sink


class Submission:
    """Needs self.llm, self._loop, self.tokenizer, self.adapters, self.sampling_defaults and self.abort."""

    def _params(self, sampling_params: SamplingParams | None, overrides: dict) -> SamplingParams:
        base = SamplingParams.coerce(sampling_params) if sampling_params is not None else self.sampling_defaults
        return base.with_updates(**overrides) if overrides else base

    def _encode(self, prompt: str) -> list[int]:
        if not isinstance(prompt, str):
            raise InvalidRequestError(f"a prompt must be a string, got {type(prompt).__name__}")
        try:
            check_text(prompt, "the prompt")
        except MessageError as exc:
            raise InvalidRequestError(str(exc)) from None
        for adapter in self.adapters:
            prompt = adapter.prepare_prompt(prompt)
        return list(self.tokenizer(prompt)["input_ids"])

    def _request(self, prompt: str, params: SamplingParams, request_id: str | None = None,
                 prompt_token_ids: list[int] | None = None, deltas: bool = True) -> RequestState:
        """A checked request (raises here, in the caller, before anything changes) with its own sink."""
        ids = list(prompt_token_ids) if prompt_token_ids is not None else self._encode(prompt)
        self.llm.check_request(ids, params)
        sink = Sink(lambda: self._loop.alive)
        return RequestState(request_id or f"req-{uuid.uuid4().hex[:16]}", prompt, ids, params, sink, deltas)

    def _submit(self, prompt: str, params: SamplingParams, request_id: str | None = None,
                prompt_token_ids: list[int] | None = None, deltas: bool = True) -> RequestState:
        """The one way in: every entry point submits through here and reads the request's sink."""
        request = self._request(prompt, params, request_id, prompt_token_ids, deltas)
        self._loop.submit([request])
        return request

    # ANCHOR: follow
    def _follow(self, request: RequestState) -> Iterator[CompletionDelta | GenerationOutput]:
        """A submitted request's items from its sink, in order: its deltas, then its result (through
        self._finish, the adapters' last word), then nothing more. An error from the sink is raised.

        However the reading ends before the result (the caller stops iterating and the generator
        is closed or collected, or the sink raised), the request is aborted: a request nobody
        reads must not keep the engine busy nor hold its blocks.
        """
        # Idea: a generator's finally runs when its reader leaves early: that is where the abort goes.
        # Stuck? `miniyaie hint 5.15` prints hints, one level at a time.
        # TODO(Task 5.15): The front door. Replace these lines with your code.
        raise NotImplementedError('Chapter 5, Task 15: The front door — see book/src/ch05_engine_loop.md')
        yield  # never runs: it keeps this function a generator, as its callers expect

    async def _follow_async(self, request: RequestState) -> AsyncIterator[CompletionDelta | GenerationOutput]:
        """_follow for coroutines: the same items and the same abort, waiting with request.sink.get_async()
        (so the event loop runs other coroutines meanwhile); a cancelled reader aborts its request too."""
        # Idea: the same shape as _follow; only the wait differs.
        # Stuck? `miniyaie hint 5.15` prints hints, one level at a time.
        # TODO(Task 5.15): The front door. Replace these lines with your code.
        raise NotImplementedError('Chapter 5, Task 15: The front door — see book/src/ch05_engine_loop.md')
        yield  # never runs: it keeps this function a generator, as its callers expect
    # ANCHOR_END: follow

    def _result(self, request: RequestState) -> GenerationOutput:
        return list(self._follow(request))[-1]

    async def _result_async(self, request: RequestState) -> GenerationOutput:
        return [item async for item in self._follow_async(request)][-1]

    def _finish(self, result: GenerationOutput) -> GenerationOutput:
        for adapter in self.adapters:
            result = adapter.process_output(result)
        return result

