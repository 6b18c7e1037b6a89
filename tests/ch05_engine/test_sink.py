"""Task 5.13: the sink that carries one request's answers from the engine thread to a thread or a coroutine.

The engine thread is played by a plain thread that puts items on a schedule.
Every wait is bounded (asyncio.wait_for): a reader that never wakes fails
with a message instead of hanging.
"""

import asyncio
import queue
import threading
import time
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from miniyaie.engine import sink as sink_module
from miniyaie.engine.errors import EngineError
from miniyaie.engine.sink import Sink


class Putter(threading.Thread):
    """The engine thread's part: put items[i] after delays[i] seconds (from the previous put).

    What put raises is kept and raised again in the test (`check`), not lost in a thread.
    """

    def __init__(self, sink: Sink, items: list, delays: list[float]):
        super().__init__(daemon=True)
        self.sink, self.items, self.delays, self.error = sink, items, delays, None

    def run(self):
        try:
            for item, delay in zip(self.items, self.delays):
                time.sleep(delay)
                self.sink.put(item)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread by check()
            self.error = exc

    def check(self) -> None:
        self.join(5)
        if self.error is not None:
            raise self.error


def put_later(sink: Sink, items: list, delays: list[float]) -> Putter:
    putter = Putter(sink, items, delays)
    putter.start()
    return putter


def read_async(sink: Sink, count: int, within: float = 5.0, putter: Putter | None = None) -> list:
    async def main():
        return [await sink.get_async() for _ in range(count)]

    try:
        got = asyncio.run(asyncio.wait_for(main(), within))
    except asyncio.TimeoutError:
        if putter is not None:
            putter.check()
        raise AssertionError(f"the async reader did not get its {count} item(s) within {within} s: "
                             "is it woken when an item is put?") from None
    if putter is not None:
        putter.check()
    return got


@pytest.mark.task("5.13")
@settings(max_examples=10, deadline=None)
@given(items=st.lists(st.integers(), min_size=1, max_size=8), data=st.data())
def test_a_coroutine_gets_every_item_in_order_and_is_woken_when_it_comes(items, data):
    delays = data.draw(st.lists(st.sampled_from([0.0, 0.001, 0.02]), min_size=len(items), max_size=len(items)))
    with mock.patch.object(sink_module, "POLL_SECONDS", 60.0):  # a reader that only polls would wait a minute
        sink = Sink(lambda: True)
        putter = put_later(sink, items, delays)
        assert read_async(sink, len(items), putter=putter) == items


@pytest.mark.task("5.13")
def test_items_put_before_the_first_read_are_not_lost():
    sink = Sink(lambda: True)
    assert sink.put("a") and sink.put("b"), "put returns True while someone may still read"
    assert read_async(sink, 2) == ["a", "b"]


@pytest.mark.task("5.13")
def test_waiting_never_blocks_the_event_loop(monkeypatch):
    monkeypatch.setattr(sink_module, "POLL_SECONDS", 60.0)
    sink = Sink(lambda: True)
    ticks = []

    async def main():
        async def heartbeat():
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        beat = asyncio.ensure_future(heartbeat())
        try:
            return await sink.get_async()
        finally:
            beat.cancel()

    putter = put_later(sink, ["late"], [0.3])
    try:
        got = asyncio.run(asyncio.wait_for(main(), 5))
    finally:
        putter.check()
    assert got == "late"
    assert len(ticks) >= 5, (
        f"another coroutine ran only {len(ticks)} time(s) in the 0.3 s the reader waited: "
        "the reader blocked the event loop (take items without waiting, sleep on the event)")


class CountingQueue(queue.SimpleQueue):
    looks = 0

    def get_nowait(self):
        CountingQueue.looks += 1
        return super().get_nowait()


@pytest.mark.task("5.13")
def test_an_idle_reader_sleeps_instead_of_spinning(monkeypatch):
    monkeypatch.setattr(sink_module, "POLL_SECONDS", 60.0)
    monkeypatch.setattr(sink_module.queue, "SimpleQueue", CountingQueue)
    CountingQueue.looks = 0
    sink = Sink(lambda: True)
    # the reader is already waiting when "first" comes (so the event is set once), then idle for 0.3 s
    putter = put_later(sink, ["first", "second"], [0.1, 0.3])
    assert read_async(sink, 2, putter=putter) == ["first", "second"]
    assert CountingQueue.looks < 20, (
        f"the reader looked at the queue {CountingQueue.looks} times for 2 items: an idle reader spins "
        "(clear the event before sleeping on it: one left set wakes every wait at once)")


@pytest.mark.task("5.13")
def test_an_error_item_is_raised_to_the_coroutine():
    sink = Sink(lambda: True)
    putter = put_later(sink, ["delta", EngineError("the request failed")], [0.0, 0.01])

    async def main():
        first = await sink.get_async()
        with pytest.raises(EngineError, match="the request failed"):
            await sink.get_async()
        return first

    try:
        got = asyncio.run(asyncio.wait_for(main(), 5))
    finally:
        putter.check()
    assert got == "delta"


@pytest.mark.task("5.13")
def test_a_reader_whose_engine_died_gets_what_was_left_then_an_error(monkeypatch):
    monkeypatch.setattr(sink_module, "POLL_SECONDS", 0.05)
    alive = [True]
    sink = Sink(lambda: alive[0])
    sink.put("last words")
    alive[0] = False

    async def main():
        first = await sink.get_async()
        with pytest.raises(EngineError):
            await sink.get_async()  # nothing will ever come: it must not wait forever
        return first

    assert asyncio.run(asyncio.wait_for(main(), 5)) == "last words"


@pytest.mark.task("5.13")
def test_put_says_whether_anyone_can_still_read():
    sink = Sink(lambda: True)
    assert sink.put("before any reader") is True, "no reader yet: one may still come"

    async def main():
        reader = asyncio.ensure_future(sink.get_async())
        first = await reader  # the item already there
        reader = asyncio.ensure_future(sink.get_async())
        await asyncio.sleep(0.05)  # the reader is bound to this loop and asleep
        said = await asyncio.to_thread(sink.put, "while a reader waits")  # from another thread, as the engine does
        return first, said, await reader

    first, said, second = asyncio.run(asyncio.wait_for(main(), 5))
    assert (first, second) == ("before any reader", "while a reader waits")
    assert said is True, f"put returned {said!r} while its reader's event loop was running: True"
    assert sink.put("nobody reads this") is False, "the reader's event loop is closed: put must say so"


@pytest.mark.task("5.13")
def test_a_thread_reader_gets_items_put_from_the_engine_thread(monkeypatch):
    monkeypatch.setattr(sink_module, "POLL_SECONDS", 0.05)
    putter: list[threading.Thread] = []
    sink = Sink(lambda: putter[0].is_alive())  # the "engine" lives as long as the putting thread
    putter.append(put_later(sink, [1, 2, 3], [0.05, 0.01, 0.0]))
    try:
        got = [sink.get() for _ in range(3)]
    finally:
        putter[0].check()
    assert got == [1, 2, 3]


@pytest.mark.task("5.13")
def test_a_thread_reader_gets_the_error_and_is_not_left_waiting_by_a_dead_engine(monkeypatch):
    monkeypatch.setattr(sink_module, "POLL_SECONDS", 0.05)
    alive = [True]
    sink = Sink(lambda: alive[0])
    sink.put(EngineError("the request failed"))
    with pytest.raises(EngineError, match="the request failed"):
        sink.get()  # an error item is raised, not returned
    sink.put("last words")
    alive[0] = False
    box = []

    def read_twice():
        box.append(sink.get())
        try:
            sink.get()
        except EngineError as exc:
            box.append(exc)

    reader = threading.Thread(target=read_twice, daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "a thread waiting on a sink whose engine died must not wait forever"
    assert box[0] == "last words" and isinstance(box[1], EngineError), box
