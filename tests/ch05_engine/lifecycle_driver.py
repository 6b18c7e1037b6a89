"""Chapter 5's request lifecycle driven by hand: LLMEngine steps, OutputProcessor events, no engine thread.

Task 5.12's tests run through this, so they need only the tasks before it
(the sink and the engine thread are Tasks 5.13 and 5.14). What a caller
would get is what `tell` records: CompletionDeltas, then the GenerationOutput.
"""

from __future__ import annotations

import itertools

import pytest

from miniyaie.engine import CompletionDelta, GenerationOutput, LLMEngine, SamplingParams
from miniyaie.engine.request_state import OutputProcessor, RequestState

MAX_STEPS = 2000  # the tiny model needs tens: a request that never ends fails here


class LifecycleDriver:
    def __init__(self, llm: LLMEngine, tokenizer, eos_token_ids):
        self.llm, self.tokenizer = llm, tokenizer
        self.told: dict[str, list] = {}
        self.processor = OutputProcessor(llm, tokenizer, list(eos_token_ids), self._tell)
        self._ids = itertools.count()

    def _tell(self, request: RequestState, item: object) -> None:
        self.told[request.request_id].append(item)

    def submit(self, prompt: str, **params) -> RequestState:
        request_id = f"r{next(self._ids)}"
        ids = list(self.tokenizer(prompt)["input_ids"])
        request = RequestState(request_id, prompt, ids, SamplingParams(**params), sink=None, deltas=True)
        self.told[request_id] = []
        self.processor.start(request)
        return request

    def step(self) -> None:
        for event in self.llm.step():
            if self.processor.request_of(event.request_id) is not None:
                self.processor.on_event(event)

    def stream(self, prompt: str, **params):
        """The items a caller would read, one at a time; closing early aborts the request."""
        request = self.submit(prompt, **params)
        items, done = self.told[request.request_id], False
        try:
            for _ in range(MAX_STEPS):
                while items:
                    item = items.pop(0)
                    done = isinstance(item, GenerationOutput)
                    yield item
                    if done:
                        return
                if not self.llm.has_unfinished():
                    pytest.fail("the engine has nothing left to do, yet the request's result never came: does every "
                                "completion record its finish_reason, and is the result sent when the last one ends?")
                self.step()
            pytest.fail(f"no result after {MAX_STEPS} steps")
        finally:
            if not done:
                self.processor.abort(request)

    def run(self, prompt: str, **params) -> tuple[list[CompletionDelta], GenerationOutput]:
        items = list(self.stream(prompt, **params))
        return items[:-1], items[-1]

    def generate(self, prompt: str, **params) -> GenerationOutput:
        return self.run(prompt, **params)[1]

    def assert_idle(self) -> None:
        scheduler = self.llm.scheduler
        assert not scheduler.running and not scheduler.waiting, (
            f"a request is left in the engine: running {[r.request_id for r in scheduler.running]}, "
            f"waiting {[r.request_id for r in scheduler.waiting]}")
        assert self.llm.num_request_blocks == 0, f"{self.llm.num_request_blocks} KV blocks still held by finished requests"
