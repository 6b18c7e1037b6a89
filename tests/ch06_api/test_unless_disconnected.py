"""Task 6.4 on its own: collect (observe every item, always close the engine stream) and
unless_disconnected (a race between the answer and the client's hang-up)."""

import asyncio

import pytest

from miniyaie.api.errors import ClientDisconnected
from miniyaie.api.streaming import collect, unless_disconnected
from miniyaie.engine import CompletionDelta, CompletionOutput, GenerationOutput


class FakeRequest:
    """An ASGI request whose next message is the client's hang-up after `hang_up_after` seconds (None: never)."""

    def __init__(self, hang_up_after: float | None):
        self.hang_up_after = hang_up_after

    async def receive(self):
        if self.hang_up_after is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.hang_up_after)
        return {"type": "http.disconnect"}


class Work:
    """A collection that takes `seconds` and then answers or raises; records whether it unwound."""

    def __init__(self, seconds: float, answer="done"):
        self.seconds, self.answer, self.cleaned_up = seconds, answer, False
        self.cleaned_up_when_raised = False

    async def run(self):
        try:
            await asyncio.sleep(self.seconds)
            if isinstance(self.answer, BaseException):
                raise self.answer
            return self.answer
        finally:
            await asyncio.sleep(0)  # unwinding takes a turn of the loop, as closing an engine stream does
            self.cleaned_up = True


def race(hang_up_after, work):
    async def main():
        already = asyncio.all_tasks()
        try:
            return await unless_disconnected(FakeRequest(hang_up_after), work.run())
        except ClientDisconnected:
            work.cleaned_up_when_raised = work.cleaned_up
            raise
        finally:
            for _ in range(3):  # a cancelled task finishes within a turn or two of the loop
                await asyncio.sleep(0)
            left = [t for t in asyncio.all_tasks() - already if not t.done()]
            assert not left, f"{len(left)} task(s) still running after unless_disconnected returned (cancel the loser)"

    return asyncio.run(asyncio.wait_for(main(), 5))


@pytest.mark.task("6.4")
def test_the_answer_wins_when_it_comes_first():
    work = Work(0.01)
    assert race(None, work) == "done"
    assert race(1.0, Work(0.01)) == "done", "a client still connected gets its answer"


@pytest.mark.task("6.4")
def test_a_hang_up_cancels_the_work_and_waits_for_it_to_unwind():
    work = Work(10.0)
    with pytest.raises(ClientDisconnected):
        race(0.02, work)
    assert work.cleaned_up_when_raised, (
        "ClientDisconnected was raised before the cancelled work had unwound: its finally (which closes the "
        "engine stream and frees the request's blocks) must have run by then"
    )


@pytest.mark.task("6.4")
def test_an_error_in_the_work_reaches_the_caller_as_it_is():
    with pytest.raises(ValueError, match="bad"):
        race(None, Work(0.01, ValueError("bad")))


# ---------------------------------------------------------------- collect
class Clock:
    """A RequestTimer stand-in: what it was told. `fail_at_token` makes its n-th on_token raise."""

    def __init__(self, fail_at_token: int | None = None):
        self.tokens, self.finished, self.fail_at_token = [], [], fail_at_token

    def on_token(self, index, now=None):
        self.tokens.append(index)
        if len(self.tokens) == self.fail_at_token:
            raise RuntimeError("the clock broke")

    def on_finish(self, result, now=None):
        self.finished.append(result)


class EngineStream:
    """An engine stream: yields `items`, then waits forever if `hang` (a request still running); records its closing."""

    def __init__(self, items, hang=False):
        self.items, self.hang, self.closed = items, hang, False

    async def run(self):
        try:
            for item in self.items:
                yield item
            if self.hang:
                await asyncio.Event().wait()
        finally:
            self.closed = True


RESULT = GenerationOutput("r", "hi", [1], [CompletionOutput(0, "abc", [7, 8, 9], "length"), CompletionOutput(1, "d", [5], "stop")])
# a delta with two tokens (completion 0) and one with none (completion 1's finish): a clock told once per delta
# hears completion 1 twice and completion 0 twice, not [0, 0, 0, 1]
DELTAS = [CompletionDelta("r", 0, "ab", [7, 8]), CompletionDelta("r", 1, "d", [5]),
          CompletionDelta("r", 1, "", [], "stop"), CompletionDelta("r", 0, "c", [9], "length")]


@pytest.mark.task("6.4")
def test_collect_returns_the_result_and_tells_the_clock_every_token():
    clock, stream = Clock(), EngineStream([*DELTAS, RESULT])
    result = asyncio.run(asyncio.wait_for(collect(stream.run(), clock), 5))
    assert result is RESULT, "collect returns the last item of the engine stream: the request's result"
    assert sorted(clock.tokens) == [0, 0, 0, 1], (
        f"the clock heard tokens of completions {clock.tokens}; expected one on_token per token id "
        "(a delta may carry two tokens, or none) with the delta's index"
    )
    assert clock.finished == [RESULT], "the result is the clock's finish (on_finish), once"
    assert asyncio.run(collect(EngineStream([]).run(), Clock())) is None, "a stream that yields nothing: None"


@pytest.mark.task("6.4")
def test_collect_closes_the_engine_stream_however_it_ends():
    stream = EngineStream(DELTAS, hang=True)

    async def broken_clock():
        items = stream.run()
        with pytest.raises(RuntimeError, match="the clock broke"):
            await collect(items, Clock(fail_at_token=2))
        return stream.closed

    assert asyncio.run(asyncio.wait_for(broken_clock(), 5)), (
        "collect ended with an error while the engine stream was still open: close it (aclose) on every way out, "
        "or the request keeps decoding for nobody"
    )

    stream = EngineStream(DELTAS, hang=True)

    async def client_left():
        task = asyncio.ensure_future(collect(stream.run(), Clock()))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return stream.closed

    assert asyncio.run(asyncio.wait_for(client_left(), 5)), "a cancelled collect must leave the engine stream closed"
