"""Nothing a request needs before it runs (template, tokens, checks, its pattern's compile) stalls the server.

A gate makes one pattern's compile last as long as a test wants: it waits
until the test opens it (or until its cancel event is set, like the real
compile), then compiles for real. While it waits, /health, a plain request
and a running stream must get their answers, which a server that compiles
on its event loop or in its engine step never gives. A client that leaves,
and a server that stops, cancel it; whatever it held is given back.
"""

import json
import re
import select
import socket
import threading
import time

import httpx
import pytest
from server_helpers import MODEL, start_server, wait_until_idle
from test_disconnect import metric

from miniyaie.structured import CompileCancelled

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks
PATTERN = "[ab]{4}"
CONSTRAINED = {"model": MODEL, "prompt": "pick", "max_tokens": 8, "guided_regex": PATTERN}
WAIT = 30  # seconds: a bound for what should take milliseconds; it only ends a test that already failed


class GatedCompile:
    """Wraps an engine's Constraints: prepare waits at the gate (cancellable), and holds are counted."""

    def __init__(self, constraints):
        self.entered, self.opened, self.cancelled = threading.Event(), threading.Event(), threading.Event()
        self.compiled = threading.Event()  # a prepare got through the gate and compiled
        self.ignore_cancel = False  # a compile that finishes although its client left
        self.holds = 0  # prepared and neither started nor released
        self._lock = threading.Lock()
        prepare, release, start = constraints.prepare, constraints.release, constraints.start

        def gated_prepare(params, cancel=None):
            self.entered.set()
            while not self.opened.wait(0.005):
                if cancel is not None and cancel.is_set() and not self.ignore_cancel:
                    self.cancelled.set()
                    raise CompileCancelled("cancelled at the gate")
            prepare(params, None if self.ignore_cancel else cancel)
            self._count(+1)
            self.compiled.set()

        def counted_release(params):
            self._count(-1)
            release(params)

        def counted_start(ids, params):
            self._count(-1)
            start(ids, params)

        constraints.prepare, constraints.release, constraints.start = gated_prepare, counted_release, counted_start

    def _count(self, change: int) -> None:
        with self._lock:
            self.holds += change


@pytest.fixture
def gated(tiny_loaded):
    """(engine, server, gate): a fresh server whose pattern compiles wait at a closed gate."""
    engine, server = start_server(tiny_loaded)
    gate = GatedCompile(engine.llm.constraints)
    yield engine, server, gate
    gate.opened.set()
    server.__exit__(None, None, None)
    engine.close()


def in_background(fn, *args, **kwargs):
    """Run fn in a thread; (thread, result list that gets fn's return value or exception)."""
    result = []

    def run():
        try:
            result.append(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - handed to the test, which asserts on it
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def compile_begins(gate, answered) -> None:
    """Wait until the request's pattern is at the gate; fail at once, with the server's answer, when it
    answered first (a refusal, a 500): a compile that will never come must not cost the whole bound."""
    deadline = time.monotonic() + WAIT
    while not gate.entered.wait(0.02):
        got = answered()
        if got is not None:
            pytest.fail(f"the server answered before the request's pattern began to compile: {got}")
        assert time.monotonic() < deadline, "the request's pattern never began to compile"


def reply_of(reply: list):
    """What a request run by in_background has answered so far (None: nothing yet)."""
    if not reply:
        return None
    return f"{reply[0].status_code} {reply[0].text[:300]}" if hasattr(reply[0], "status_code") else repr(reply[0])


def send_then_hang_up(server, gate, body: dict) -> None:
    """POST body on a raw connection, wait until its compile is at the gate, then close the connection."""
    data = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    with socket.create_connection((server.host, server.port), timeout=WAIT) as sock:
        sock.sendall(head + data)

        def answered():
            if not select.select([sock], [], [], 0)[0]:
                return None
            return sock.recv(4096).decode(errors="replace")[:300] or "the connection was closed"

        compile_begins(gate, answered)


def test_health_a_plain_request_and_a_stream_are_served_while_a_pattern_compiles(gated):
    engine, server, gate = gated
    slow, reply = in_background(httpx.post, f"{server.url}/v1/completions", json=CONSTRAINED, timeout=2 * WAIT)
    compile_begins(gate, lambda: reply_of(reply))

    assert httpx.get(f"{server.url}/health", timeout=WAIT).status_code == 200
    plain = httpx.post(f"{server.url}/v1/completions", timeout=WAIT,
                       json={"model": MODEL, "prompt": "hello", "max_tokens": 4, "ignore_eos": True})
    assert plain.status_code == 200 and plain.json()["usage"]["completion_tokens"] == 4
    with httpx.stream("POST", f"{server.url}/v1/completions", timeout=WAIT,
                      json={"model": MODEL, "prompt": "hello", "max_tokens": 4, "ignore_eos": True, "stream": True}) as stream:
        events = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]", events
    assert json.loads(events[-2][len("data: "):])["choices"][0]["finish_reason"] == "length", "the stream ran to its end"
    assert slow.is_alive() and not gate.opened.is_set(), "all of that was served while the pattern still compiled"

    gate.opened.set()
    slow.join(2 * WAIT)
    assert reply[0].status_code == 200, reply[0].text
    assert re.fullmatch(PATTERN, reply[0].json()["choices"][0]["text"])
    assert wait_until_idle(engine)["kv_blocks"]["held_by_requests"] == 0
    assert gate.holds == 0


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
def test_a_client_that_leaves_while_its_pattern_compiles_cancels_the_compile(gated, stream):
    engine, server, gate = gated
    before = engine.get_stats()["tokens"]["prompt"]
    send_then_hang_up(server, gate, {**CONSTRAINED, "stream": stream})
    assert gate.cancelled.wait(WAIT), "the compile was not cancelled when its client left"
    deadline = time.monotonic() + WAIT
    while metric(server, "miniyaie_http_requests_total", endpoint="/v1/completions", status="499") < 1:
        assert time.monotonic() < deadline, "the hang-up was not answered as a 499"
        time.sleep(0.02)
    stats = wait_until_idle(engine)
    assert stats["tokens"]["prompt"] == before, "a request whose client left reached the engine"
    assert gate.holds == 0


def test_a_compile_that_ends_after_its_client_left_gives_back_what_it_holds(gated):
    engine, server, gate = gated
    gate.ignore_cancel = True  # it finishes anyway: its result must not be kept for a request that never comes
    before = engine.get_stats()["tokens"]["prompt"]
    send_then_hang_up(server, gate, CONSTRAINED)
    deadline = time.monotonic() + WAIT
    while metric(server, "miniyaie_http_requests_total", endpoint="/v1/completions", status="499") < 1:
        assert time.monotonic() < deadline, "the route did not give up when its client left"
        time.sleep(0.02)
    gate.opened.set()
    assert gate.compiled.wait(WAIT)
    while gate.holds != 0:
        assert time.monotonic() < deadline + WAIT, f"{gate.holds} hold(s) never given back"
        time.sleep(0.02)
    assert engine.get_stats()["tokens"]["prompt"] == before


def test_stopping_the_server_cancels_a_compile_in_flight(gated):
    engine, server, gate = gated
    slow, reply = in_background(httpx.post, f"{server.url}/v1/completions", json=CONSTRAINED, timeout=2 * WAIT)
    compile_begins(gate, lambda: reply_of(reply))
    server.server.should_exit = True  # what SIGTERM and Ctrl-C do
    server.thread.join(2 * WAIT)
    assert not server.thread.is_alive(), "the server did not stop while a pattern compiled"
    assert gate.cancelled.is_set(), "stopping did not cancel the compile"
    slow.join(WAIT)
    assert isinstance(reply[0], httpx.HTTPError) or reply[0].status_code == 503, reply
    assert gate.holds == 0


@pytest.mark.ungraded
def test_a_job_that_never_ends_does_not_keep_the_process_alive():
    """A worker still busy (a tokenizer or compile that ignores its cancel) when the program ends: it exits anyway."""
    import subprocess
    import sys

    script = ("import threading\n"
              "from miniyaie.serving.preparation import WorkerPool\n"
              "started = threading.Event()\n"
              "WorkerPool(1, 'stuck').submit(lambda: (started.set(), threading.Event().wait()))\n"
              "assert started.wait(30)\n"
              "print('main is done', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=2 * WAIT)
    assert done.returncode == 0 and "main is done" in done.stdout, done.stderr


@pytest.mark.ungraded
def test_a_stream_response_that_never_began_still_ends_its_request(served):
    """A client gone before the first byte: the response's body never starts, and its request is aborted anyway."""
    import asyncio

    from miniyaie.api.app import EventStreamResponse

    engine, _ = served
    wait_until_idle(engine)
    before = engine.get_stats()["tokens"]["output"]

    async def never_read():
        yield "data: nothing\n\n"  # pragma: no cover - the client is gone before the first chunk

    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        raise OSError("the client is gone")

    async def respond():
        [stream] = engine.submit_prepared([engine.prepare("Once upon a time", max_tokens=100, ignore_eos=True)], [None])
        with pytest.raises(Exception):  # noqa: B017 - whichever way the ASGI layer reports the dead client
            await EventStreamResponse(never_read(), [stream])({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send)

    asyncio.run(respond())
    after = wait_until_idle(engine)
    assert after["tokens"]["output"] - before < 100, "the request decoded to its end for nobody"
    assert after["kv_blocks"]["held_by_requests"] == 0


def test_a_batch_holds_one_pattern_per_prompt_and_a_refused_batch_gives_them_back(gated):
    engine, server, gate = gated
    gate.opened.set()
    batch = {**CONSTRAINED, "prompt": ["pick one", "and another"], "n": 2}
    reply = httpx.post(f"{server.url}/v1/completions", json=batch, timeout=WAIT)
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["choices"]) == 4
    assert all(re.fullmatch(PATTERN, c["text"]) for c in reply.json()["choices"])
    wait_until_idle(engine)
    assert gate.holds == 0

    before = engine.get_stats()["tokens"]["prompt"]
    refused = httpx.post(f"{server.url}/v1/completions", timeout=WAIT,
                         json={**batch, "prompt": ["pick one", "x" * 200]})  # the second is longer than the context
    assert refused.status_code == 400, refused.text
    assert gate.holds == 0, "the first prompt's pattern was kept although its batch was refused"
    assert engine.get_stats()["tokens"]["prompt"] == before
