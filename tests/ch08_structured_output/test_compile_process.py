"""Pattern compiles in worker processes (serving/compile_process.py): what a server uses so a compile holds no GIL it needs.

The index that comes back is the one the calling thread would have built, a refusal keeps its
message, a cancel kills the worker (the next compile starts another), and close() leaves no
process behind. Small byte vocabularies keep these fast; each worker start costs a fresh interpreter.
"""

import threading
import time

import pytest
from byte_vocabularies import byte_vocabulary

from miniyaie.engine import SamplingParams
from miniyaie.structured import DEAD, CompileCancelled, Constraints, IndexCache, Limits, PatternError
from miniyaie.serving.compile_process import ProcessCompiler
from miniyaie.structured.limits import Budget

pytestmark = [pytest.mark.timeout(180)]
SIZE = 300
SLOW = SamplingParams(json_schema={"type": "string", "minLength": 500})  # seconds to compile on any machine


@pytest.fixture(scope="module")
def compiler():
    compiler = ProcessCompiler()
    yield compiler
    compiler.close()


def walk(index, text: bytes) -> list[int]:
    """The states a guide passes through reading `text` one byte token at a time."""
    states = [index.dfa.initial]
    for byte in text:
        states.append(index.next_state(states[-1], byte))
    return states


@pytest.mark.task("8.7")
@pytest.mark.parametrize("pattern,text", [(r'\{"id": [0-9]{1,3}, "ok": (true|false)\}', b'{"id": 42, "ok": true}'),
                                          ("é[a-c]+x?", "ébbx".encode())])
def test_a_process_compile_gives_the_index_the_thread_builds(compiler, pattern, text):
    vocabulary = byte_vocabulary(size=SIZE)
    here = IndexCache(vocabulary, SIZE).get(pattern)
    there = compiler(pattern, Budget(Limits()), "guided_regex", vocabulary, SIZE)
    assert there.built_states >= 1, "the first state's mask is built in the worker, not again here"
    assert there.dfa.next_state.shape == here.dfa.next_state.shape
    for mine, theirs in zip(walk(here, text), walk(there, text), strict=True):  # state numbers may differ (a
        assert theirs != DEAD and there.mask(theirs).equal(here.mask(mine))  # set's order in another process)
        assert bool(there.dfa.accepting[theirs]) == bool(here.dfa.accepting[mine])


@pytest.mark.task("8.7")
@pytest.mark.parametrize("params", [dict(regex="(a|b)*a(a|b){14}"), dict(regex="[a-"), dict(regex="a{1000000}")])
def test_a_refusal_keeps_its_message_across_the_process(compiler, params):
    params = SamplingParams(**params)
    with pytest.raises(PatternError) as in_thread:
        Constraints(byte_vocabulary(size=SIZE), SIZE).prepare(params)
    in_process = Constraints(byte_vocabulary(size=SIZE), SIZE)
    in_process.compile_in_process(lambda: compiler)  # this module's worker: one start for all the tests
    with pytest.raises(PatternError) as crossed:
        in_process.prepare(params)
    assert str(crossed.value) == str(in_thread.value)


@pytest.mark.task("8.7")
def test_the_deadline_holds_in_the_worker(compiler):
    c = Constraints(byte_vocabulary(size=SIZE), SIZE, Limits(compile_seconds=0.3))
    c.compile_in_process(lambda: compiler)
    with pytest.raises(PatternError, match=r"compile budget of 0\.3 s \(compile_seconds\)"):
        c.prepare(SLOW)


@pytest.mark.task("8.7")
def test_the_cache_counts_and_holds_what_the_process_compiled_and_close_leaves_no_worker():
    compiler = ProcessCompiler()
    c = Constraints(byte_vocabulary(size=SIZE), SIZE)
    c.compile_in_process(lambda: compiler)
    try:
        params = SamplingParams(regex="[a-c]{2}x")
        c.prepare(params)
        assert c.stats()["compiles"] == 1 and c.stats()["indexes_in_use"] == 1
        assert compiler.started == 1 and len(compiler.processes) == 1
        c.start(["r1"], params)
        c.forget("r1")
        assert c.stats()["indexes_in_use"] == 0 and c.stats()["compiles"] == 1
        assert c.stats()["index_cache_bytes"] > 0
        [worker] = compiler.processes
    finally:
        started = time.monotonic()
        c.close()
    worker.join(timeout=5)
    assert not worker.is_alive() and compiler.processes == []
    assert time.monotonic() - started < 5, "close kills: it never waits for a compile"
    with pytest.raises(CompileCancelled):
        c.prepare(SamplingParams(regex="abd"))


@pytest.mark.task("8.7")
def test_a_cancel_kills_the_worker_and_the_next_compile_starts_another():
    compiler = ProcessCompiler()
    c = Constraints(byte_vocabulary(size=SIZE), SIZE)
    c.compile_in_process(lambda: compiler)
    try:
        c.prepare(SamplingParams(regex="ab"))  # a worker is up
        [first] = compiler.processes
        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        with pytest.raises(CompileCancelled):
            c.prepare(SLOW, cancel)
        first.join(timeout=5)
        assert not first.is_alive(), "the cancelled compile's worker is killed"
        assert c.stats()["indexes_in_use"] == 1  # only "ab"'s hold
        c.prepare(SamplingParams(regex="[0-9]+"))
        assert compiler.started == 2 and compiler.processes and compiler.processes[0] is not first
    finally:
        compiler.close()
