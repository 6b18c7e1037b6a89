"""Task 6.3's unless_disconnected on its own: a race between the answer and the client's hang-up."""

import asyncio

import pytest

from miniyaie.api.errors import ClientDisconnected
from miniyaie.api.streaming import unless_disconnected


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


@pytest.mark.task("6.3")
def test_the_answer_wins_when_it_comes_first():
    work = Work(0.01)
    assert race(None, work) == "done"
    assert race(1.0, Work(0.01)) == "done", "a client still connected gets its answer"


@pytest.mark.task("6.3")
def test_a_hang_up_cancels_the_work_and_waits_for_it_to_unwind():
    work = Work(10.0)
    with pytest.raises(ClientDisconnected):
        race(0.02, work)
    assert work.cleaned_up_when_raised, (
        "ClientDisconnected was raised before the cancelled work had unwound: its finally (which closes the "
        "engine stream and frees the request's blocks) must have run by then"
    )


@pytest.mark.task("6.3")
def test_an_error_in_the_work_reaches_the_caller_as_it_is():
    with pytest.raises(ValueError, match="bad"):
        race(None, Work(0.01, ValueError("bad")))
