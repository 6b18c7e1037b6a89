"""Task 5.14: the engine thread, and the fault boundaries that keep it serving.

The loop is driven through its own interface (submit, abort, close) with
requests whose answers go to a Sink. Every wait is bounded: a loop that
never wakes, or never answers, fails the test with a message.
"""

import logging
import threading
import time
from pathlib import Path

import psutil
import pytest

from miniyaie.engine import EngineConfig, EngineError, LLMEngine, RequestFailedError, SamplingParams
from miniyaie.engine.engine_loop import EngineLoop
from miniyaie.engine.outputs import GenerationOutput
from miniyaie.engine.request_state import RequestState
from miniyaie.engine.sink import Sink

WAIT_S = 8.0  # the tiny model answers in milliseconds: eight seconds of silence is a lost answer
PROMPTS = ["Once upon a time there", "The capital of France is", "hello world, hello"]


@pytest.fixture
def make_loop(tiny_loaded):
    loops = []

    def make(tokenizer=None):
        llm = LLMEngine(tiny_loaded.model, EngineConfig(block_size=4, num_blocks=96, max_num_batched_tokens=24))
        loop = EngineLoop(llm, tokenizer or tiny_loaded.tokenizer, tiny_loaded.eos_token_ids)
        loops.append(loop)
        return loop

    yield make
    for loop in loops:
        closer = threading.Thread(target=loop.close, daemon=True)
        closer.start()
        closer.join(WAIT_S)


def request(loop, prompt, request_id, **params) -> RequestState:
    ids = list(loop.processor.tokenizer(prompt)["input_ids"])
    params = SamplingParams(**{"max_tokens": 6, "ignore_eos": True, **params})
    return RequestState(request_id, prompt, ids, params, Sink(lambda: loop.alive), deltas=False)


def answer(req: RequestState):
    """The request's final item (its GenerationOutput, or the error it ended with), within WAIT_S."""
    box = []

    def read():
        try:
            box.append(req.sink.get())
        except BaseException as exc:  # noqa: BLE001 -- the error is the answer
            box.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(WAIT_S)
    if not box:
        pytest.fail(f"request {req.request_id} got no answer in {WAIT_S:g} s: does the loop wake up when a request "
                    "is submitted, and step while the engine has work?")
    return box[0]


def wait_idle(loop):
    deadline = time.monotonic() + WAIT_S
    while loop.in_flight or loop.llm.has_unfinished():
        assert time.monotonic() < deadline, "the loop did not finish its requests"
        time.sleep(0.01)


# ------------------------------------------------------------------------------------------ the loop
@pytest.mark.task("5.14")
def test_submitted_requests_are_answered_with_the_engines_tokens(make_loop, tiny_loaded):
    loop = make_loop()
    want = LLMEngine(tiny_loaded.model, EngineConfig(block_size=4, num_blocks=96)).generate(
        [list(tiny_loaded.tokenizer(p)["input_ids"]) for p in PROMPTS], SamplingParams(max_tokens=6, ignore_eos=True))
    requests = [request(loop, p, f"r{i}") for i, p in enumerate(PROMPTS)]
    loop.submit(requests[:2])
    loop.submit(requests[2:])
    for req, w in zip(requests, want):
        got = answer(req)
        assert isinstance(got, GenerationOutput), f"{req.request_id} ended with {got!r}"
        assert got.token_ids == w.token_ids, f"{req.request_id}: {got.token_ids}, the engine alone gives {w.token_ids}"
    wait_idle(loop)
    assert loop.llm.num_request_blocks == 0 and loop.alive
    uptime = loop.stats()["uptime_seconds"]
    assert 0 < loop.busy_seconds <= uptime, (
        f"busy_seconds ({loop.busy_seconds:.3f}) adds up the time of each step: more than 0, at most the "
        f"loop's lifetime ({uptime:.3f} s)")


def wakeups(thread_id: int) -> int | None:
    """How many times the thread went to sleep and was woken (Linux's voluntary context switches); None elsewhere."""
    status = Path(f"/proc/self/task/{thread_id}/status")
    if not status.exists():
        return None
    line = next(line for line in status.read_text().splitlines() if line.startswith("voluntary_ctxt_switches"))
    return int(line.split()[1])


@pytest.mark.task("5.14")
def test_an_idle_loop_sleeps_instead_of_spinning(make_loop):
    loop = make_loop()
    first = request(loop, PROMPTS[0], "warm")
    loop.submit([first])
    assert isinstance(answer(first), GenerationOutput)
    wait_idle(loop)
    time.sleep(0.5)
    before = next(t for t in psutil.Process().threads() if t.id == loop._thread.native_id)
    time.sleep(1.0)
    after = next(t for t in psutil.Process().threads() if t.id == loop._thread.native_id)
    busy = (after.user_time + after.system_time) - (before.user_time + before.system_time)
    assert busy < 0.2, f"the idle engine thread used {busy:.2f} s of CPU in 1 s: wait on the condition, do not poll"
    woken = wakeups(loop._thread.native_id)
    if woken is not None:  # Linux counts each time a thread gives up the CPU and is woken again
        time.sleep(1.0)
        woken = wakeups(loop._thread.native_id) - woken
        assert woken <= 5, (
            f"the idle engine thread woke {woken} times in 1 s: it polls (a sleep or a timed wait in a loop); "
            "an idle loop waits on the condition until a submit, an abort or close wakes it")
    late = request(loop, PROMPTS[1], "late")
    loop.submit([late])
    assert isinstance(answer(late), GenerationOutput), "a request submitted to a sleeping loop must wake it"


@pytest.mark.task("5.14")
def test_an_abort_ends_its_request_and_returns_its_blocks(make_loop):
    loop = make_loop()
    long = request(loop, PROMPTS[0], "long", max_tokens=200)
    other = request(loop, PROMPTS[1], "other")
    loop.submit([long, other])
    deadline = time.monotonic() + WAIT_S
    while not loop.llm.counters["steps"]:
        assert time.monotonic() < deadline, "the loop never stepped"
        time.sleep(0.005)
    assert loop.abort("long")
    got = answer(long)
    assert isinstance(got, GenerationOutput) and got.finish_reason == "abort", f"the aborted request ended with {got!r}"
    assert isinstance(answer(other), GenerationOutput)
    wait_idle(loop)
    assert loop.llm.num_request_blocks == 0, "an aborted request's blocks must come back"
    assert not loop.abort("long"), "an ended request is no longer in flight"


@pytest.mark.task("5.14")
def test_close_ends_the_thread_and_tells_every_caller(make_loop, monkeypatch):
    loop = make_loop()
    waiting = [request(loop, PROMPTS[i % 3], f"q{i}", max_tokens=100) for i in range(3)]
    loop.submit(waiting)
    assert loop.alive, "the loop thread stopped on its own"
    end_all = loop._end_all

    def slow_end_all(*args, **kwargs):  # the thread's last act takes a moment: close must wait for it
        time.sleep(0.3)
        end_all(*args, **kwargs)

    monkeypatch.setattr(loop, "_end_all", slow_end_all)
    closer = threading.Thread(target=loop.close, daemon=True)
    closer.start()
    closer.join(WAIT_S)
    assert not closer.is_alive(), "close() did not return: the loop must return when closed"
    assert not loop.alive, "close() returned while the engine thread still ran: wait for it (join)"
    assert loop.error is None, f"the loop crashed instead of closing: {loop.error!r}"
    for req in waiting:
        got = answer(req)
        assert isinstance(got, GenerationOutput) or (isinstance(got, EngineError) and "closed" in str(got)), (
            f"{req.request_id} should end with its result or an EngineError saying the engine was closed, got {got!r}")


@pytest.mark.task("5.14")
def test_closing_gives_back_the_blocks_and_one_failed_return_silences_no_caller(make_loop, monkeypatch, caplog):
    loop = make_loop()
    step = loop.llm.step

    def slow_step():  # keeps the three requests running until close
        time.sleep(0.02)
        return step()

    monkeypatch.setattr(loop.llm, "step", slow_step)
    running = [request(loop, PROMPTS[i], f"q{i}", max_tokens=100) for i in range(3)]
    loop.submit(running)
    deadline = time.monotonic() + WAIT_S
    while loop.llm.counters["steps"] < 2:
        assert time.monotonic() < deadline, "the loop never stepped"
        time.sleep(0.005)
    drop = loop.processor.drop

    def failing_drop(req):
        if req.request_id == "q0":
            raise RuntimeError("injected: giving back q0's blocks failed")
        drop(req)

    monkeypatch.setattr(loop.processor, "drop", failing_drop)
    closer = threading.Thread(target=loop.close, daemon=True)
    closer.start()
    closer.join(WAIT_S)
    assert not closer.is_alive(), "close() did not return"
    for req in running:
        got = answer(req)
        assert isinstance(got, EngineError) and "closed" in str(got), (
            f"{req.request_id} got {got!r}: every caller still waiting is told the engine was closed, even after "
            "another request's cleanup failed")
    assert set(loop.llm.scheduler.requests) == {"q0"}, (
        f"still in the engine: {sorted(loop.llm.scheduler.requests)}; closing gives back the blocks of every "
        "request in flight (q0's failed on purpose)")
    assert loop.error is not None and "q0" in str(loop.error), "a failed return while closing is recorded in error"
    assert any(r.levelname == "ERROR" and "q0" in r.getMessage() for r in caplog.records), (
        "a failed return while closing is logged as an error, naming the request")


# ------------------------------------------------------------------------------------------ its fault boundaries
class PoisonedTokenizer:
    """The tiny tokenizer, except that decoding `poison` raises (a bug that shows in one request only)."""

    def __init__(self, tokenizer, poison: int):
        self._tokenizer, self.poison = tokenizer, poison

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def decode(self, ids, **kwargs):
        if self.poison in list(ids):
            raise RuntimeError("planted detokenizer bug")
        return self._tokenizer.decode(ids, **kwargs)


def poison_for(tiny_loaded):
    """(a token only the first prompt's greedy output contains, the outputs)."""
    llm = LLMEngine(tiny_loaded.model, EngineConfig(block_size=4, num_blocks=96))
    outs = llm.generate([list(tiny_loaded.tokenizer(p)["input_ids"]) for p in PROMPTS], SamplingParams(max_tokens=6, ignore_eos=True))
    others = set(outs[1].token_ids) | set(outs[2].token_ids) | {t for p in PROMPTS for t in tiny_loaded.tokenizer(p)["input_ids"]}
    only_first = [t for t in outs[0].token_ids if t not in others]
    if not only_first:
        pytest.skip("no token is in the first output only")
    return only_first[0], outs


@pytest.mark.task("5.14")
def test_a_fault_in_one_request_fails_that_request_only(make_loop, tiny_loaded, caplog):
    poison, outs = poison_for(tiny_loaded)
    loop = make_loop(PoisonedTokenizer(tiny_loaded.tokenizer, poison))
    requests = [request(loop, p, f"r{i}") for i, p in enumerate(PROMPTS)]
    loop.submit(requests)
    failed = answer(requests[0])
    assert isinstance(failed, RequestFailedError) and "planted detokenizer bug" in str(failed), (
        f"the request whose detokenizer raised should end with RequestFailedError naming the error, got {failed!r}")
    assert isinstance(failed.__cause__, RuntimeError), "keep the original exception as the error's __cause__"
    bug = [r for r in caplog.records if r.levelname == "ERROR" and "r0" in r.getMessage()]
    assert bug and bug[0].exc_info, "a bug in one request is logged as an error with its traceback"
    for req, want in zip(requests[1:], outs[1:]):
        got = answer(req)
        assert isinstance(got, GenerationOutput) and got.token_ids == want.token_ids, (
            f"{req.request_id} never met the fault, yet it ended with {got!r}: a fault must stay in its request")
    wait_idle(loop)
    assert loop.alive and loop.failed_requests == 1 and loop.llm.num_request_blocks == 0


@pytest.mark.task("5.14")
def test_a_step_that_raises_fails_the_requests_it_ran_and_the_loop_goes_on(make_loop, caplog):
    loop = make_loop()
    real_step, calls = loop.llm.step, []
    queued_during = request(loop, PROMPTS[2], "queued-during-the-step")

    def failing_step():
        calls.append(1)
        if len(calls) == 2:
            loop.submit([queued_during])  # arrives while the failing step runs: it was never in that step
            raise RuntimeError("planted step failure")
        return real_step()

    loop.llm.step = failing_step
    ran = [request(loop, p, f"r{i}") for i, p in enumerate(PROMPTS[:2])]
    loop.submit(ran)
    for req in ran:
        got = answer(req)
        assert isinstance(got, RequestFailedError) and "planted step failure" in str(got), (
            f"{req.request_id} was in the failed step: it should end with RequestFailedError, got {got!r}")
    got = answer(queued_during)
    assert isinstance(got, GenerationOutput), f"a request queued during the failed step must still be served, got {got!r}"
    wait_idle(loop)
    assert loop.alive and loop.failed_steps == 1 and loop.llm.num_request_blocks == 0
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info
              and "planted step failure" in str(r.exc_info[1])]
    assert logged, ("a failed step is a bug in the engine, not in a request: log it as an error with its traceback "
                    "(the callers hear of it, the operator must too)")


@pytest.mark.task("5.14")
def test_a_fault_while_recovering_stops_the_loop_and_says_so(make_loop, caplog):
    loop = make_loop()
    drops = []

    def failing_step():
        raise RuntimeError("planted step failure")

    def failing_drop(req):
        drops.append(req.request_id)
        raise RuntimeError("planted: the blocks cannot be returned")

    loop.llm.step, loop.processor.drop = failing_step, failing_drop
    req = request(loop, PROMPTS[0], "r")
    assert loop.alive, "the loop thread stopped on its own"
    loop.submit([req])
    got = answer(req)
    assert isinstance(got, EngineError) and "blocks cannot be returned" in str(got), (
        f"when recovery fails every caller gets an EngineError that says what stopped the loop, got {got!r}")
    deadline = time.monotonic() + WAIT_S
    while loop.alive:
        assert time.monotonic() < deadline, "the loop must stop when it cannot recover"
        time.sleep(0.01)
    assert isinstance(loop.error, RuntimeError) and "blocks cannot be returned" in str(loop.error), (
        f"loop.error should be the fault that stopped it, got {loop.error!r}")
    with pytest.raises(EngineError, match="stopped"):
        loop.check_running()
    assert drops == ["r"], (
        f"drop was called for {drops}: once the loop has died its engine is not touched again (no blocks given "
        "back by the thread's end)")
    assert any(r.levelname == "CRITICAL" for r in caplog.records), "the loop's death is logged as critical"


@pytest.mark.task("5.14")
def test_a_refused_request_is_a_warning_and_its_own_error(make_loop, caplog):
    """A request the engine refuses at start (here: a prompt longer than the model's context) fails alone, as it is."""
    loop = make_loop()
    too_long = request(loop, "hello " * 200, "too-long")  # the tiny model's context is 128 tokens
    fine = request(loop, PROMPTS[0], "fine")
    loop.submit([too_long, fine])
    got = answer(too_long)
    assert isinstance(got, EngineError) and not isinstance(got, RequestFailedError) and "context" in str(got), (
        f"an EngineError (a refusal that says why) reaches the caller as it is, got {got!r}")
    assert isinstance(answer(fine), GenerationOutput)
    refused = [r for r in caplog.records if "too-long" in r.getMessage()]
    assert refused and all(r.levelname == "WARNING" and not r.exc_info for r in refused), (
        "a refusal is expected, not a bug: log it as a warning, without a traceback")


# ------------------------------------------------------------------------------------------ the inbox
@pytest.mark.task("5.14")
def test_submit_is_all_or_nothing_and_refuses_ids_in_flight(make_loop):
    from miniyaie.engine import InvalidRequestError

    loop = make_loop()
    first = request(loop, PROMPTS[0], "a", max_tokens=100)
    loop.submit([first])
    fresh = request(loop, PROMPTS[1], "b")
    with pytest.raises(InvalidRequestError, match="'a'"):
        loop.submit([fresh, request(loop, PROMPTS[2], "a")])  # "a" is in flight
    with pytest.raises(InvalidRequestError) as twice:
        loop.submit([request(loop, PROMPTS[1], "c"), request(loop, PROMPTS[2], "c")])
    assert "'c'" in str(twice.value), f"the error names the id that appears twice ('c'): {twice.value}"
    assert loop.in_flight == 1, f"{loop.in_flight} requests in flight: a refused submission must queue none of its requests"
    assert not loop.abort("b") and not loop.abort("c"), "refused requests are not in flight"
    assert loop.abort("a") and answer(first).finish_reason == "abort"
    loop.submit([fresh])  # its id is free: it was never queued
    assert isinstance(answer(fresh), GenerationOutput)
    wait_idle(loop)
    closer = threading.Thread(target=loop.close, daemon=True)
    closer.start()
    closer.join(WAIT_S)
    with pytest.raises(EngineError, match="closed"):
        loop.submit([request(loop, PROMPTS[1], "late")])


class ThenSink(Sink):
    """A sink that, when its request's result arrives (on the engine thread), runs `then` once."""

    def __init__(self, alive, then):
        super().__init__(alive)
        self.then = then

    def put(self, item):
        delivered = super().put(item)
        if isinstance(item, GenerationOutput) and self.then is not None:
            then, self.then = self.then, None
            then()
        return delivered


@pytest.mark.task("5.14")
def test_an_abort_waits_for_the_loop_and_spares_a_later_request_with_the_same_id(make_loop, monkeypatch):
    """The abort of x is asked while x's last step runs (on the engine thread): it is queued, never applied
    from the caller's thread in the middle of a step. x ends in that step, and at that very moment a new
    request takes the id x. When the loop reads the abort, it must leave the new x alone."""
    loop = make_loop()
    entered, go = threading.Event(), threading.Event()
    step = loop.llm.step

    def held_step():
        entered.set()
        assert go.wait(WAIT_S), "the test never released the step"
        return step()

    monkeypatch.setattr(loop.llm, "step", held_step)
    later = request(loop, PROMPTS[1], "x")
    first = request(loop, PROMPTS[0], "x", max_tokens=1)
    first.sink = ThenSink(lambda: loop.alive, lambda: loop.submit([later]))
    loop.submit([first])
    assert entered.wait(WAIT_S), "the loop never stepped"
    assert loop.abort("x"), "x is in flight: its step is running"
    go.set()
    assert answer(first).finish_reason == "length", "x's one token was made in the step that was running"
    got = answer(later)
    assert isinstance(got, GenerationOutput) and got.finish_reason == "length" and len(got.token_ids) == 6, (
        f"the new request with the id x ended with {got!r}: the abort was for the request that ended, "
        "so queue the request itself, not its id")
    wait_idle(loop)
