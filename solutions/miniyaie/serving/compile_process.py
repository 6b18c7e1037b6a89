"""Pattern compiles in a separate process, so that they do not hold the server's GIL.

Compiling a pattern (regex -> byte DFA -> token index, index_cache.build_index)
is pure Python: on a worker thread it holds the GIL, and the engine thread
and the event loop wait for it in turns (a plain request took several
times as long while json_object's first compile ran). A process has its
own interpreter, so the server gives its compiles to one:

    a compile thread ── (pattern, limits, seconds left, keyword) ──> worker process: build_index
                     <── the DFA's table and the first mask, or a PatternError's message ──
    cancel set, or the deadline + a margin passed ── the thread kills the worker (the next compile starts another)

A worker is started (spawn: a fresh interpreter, never a fork of a threaded
server) when a compile finds none idle, gets the vocabulary once, and is
kept for the next compile. The deadline is still checked inside the worker;
the waiting thread checks the cancel event every POLL_SECONDS. Workers are
daemons that ignore Ctrl-C (the server stops them), and each one exits by
itself when its server is gone. The offline LLMEngine compiles on its own
thread (no compiler configured); only the server uses this.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import torch

from miniyaie.structured.fsm import ByteDFA, PatternError
from miniyaie.structured.limits import Budget, CompileCancelled
from miniyaie.structured.token_index import TokenIndex
from miniyaie.structured.vocabulary import Vocabulary

POLL_SECONDS = 0.1  # how often a waiting thread looks at the cancel event: a cancel lands within this
MARGIN_SECONDS = 2.0  # past the worker's own deadline, the parent stops waiting and kills it
WORKER_NICENESS = 10  # a worker yields the cores to the engine: a compile may wait, running requests should not
START_SECONDS = 120.0  # a new worker imports torch and the compiler; on a busy machine that takes a while


class ProcessCompiler:
    """build_index in worker processes: IndexCache's compiler (one worker per compile in flight)."""

    def __init__(self):
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.started = 0  # worker processes started (a cancel or a timeout costs one)

    def __call__(self, pattern: str, budget: Budget, keyword: str, vocabulary: Vocabulary,
                 model_vocab_size: int) -> TokenIndex:
        """The pattern's TokenIndex over `vocabulary`, built in a worker within `budget`.

        PatternError (its message as the worker wrote it) for a bad or too costly pattern;
        CompileCancelled soon after budget.cancel is set (the worker is killed)."""
        budget.check()
        worker = self._worker(vocabulary, model_vocab_size, budget)
        try:
            seconds_left = max(budget.deadline - time.monotonic(), 1e-3)
            worker.send((pattern, budget.limits, seconds_left, keyword))
            kind, value = worker.receive(budget, time.monotonic() + seconds_left + MARGIN_SECONDS)
        except BaseException:
            self._discard(worker)
            raise
        self._give_back(worker)
        if kind == "pattern_error":
            raise PatternError(value)
        if kind == "failed":
            raise RuntimeError(f"the pattern compiler failed: {value}")
        return _index_from_parts(value, vocabulary, model_vocab_size)

    def close(self) -> None:
        """Kill every worker now (a compile still waiting raises); later compiles are refused. Never waits long."""
        with self._lock:
            self._closed = True
            busy, workers = set(self._busy), self._idle + list(self._busy)
            self._idle, self._busy = [], set()
        for worker in workers:
            worker.kill(close_pipe=worker not in busy)  # a busy one's thread still reads its pipe: it closes it

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def processes(self) -> list[multiprocessing.Process]:
        """The worker processes alive now (for tests and the curious)."""
        with self._lock:
            return [w.process for w in self._idle + list(self._busy) if w.process.is_alive()]

    def _worker(self, vocabulary: Vocabulary, model_vocab_size: int, budget: Budget) -> _Worker:
        with self._lock:
            if self._closed:
                raise CompileCancelled("the pattern compiler is closed (the server is stopping)")
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                worker = _Worker(vocabulary, model_vocab_size)
                self.started += 1
            self._busy.add(worker)
        try:
            worker.wait_ready(budget)
        except BaseException:
            self._discard(worker)
            raise
        return worker

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
            if not self._closed:
                self._idle.append(worker)
                return
        worker.kill()

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
        worker.kill()


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, vocabulary: Vocabulary, model_vocab_size: int):
        context = multiprocessing.get_context("spawn")
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(
            target=_serve, name="miniyaie-compile-worker", daemon=True,
            args=(child_conn, vocabulary.token_bytes, vocabulary.eos_token_ids, model_vocab_size, os.getpid()))
        self.process.start()
        child_conn.close()  # the child holds its end: our recv sees EOF if it dies
        self.ready = self.killed = False

    def wait_ready(self, budget: Budget) -> None:
        if not self.ready:
            kind, _ = self.receive(budget, time.monotonic() + START_SECONDS)
            self.ready = kind == "ready"

    def send(self, job) -> None:
        self.conn.send(job)

    def receive(self, budget: Budget, give_up_at: float):
        """The worker's next message; CompileCancelled on a cancel, PatternError past `give_up_at`."""
        while not self.conn.poll(POLL_SECONDS):
            if budget.cancel is not None and budget.cancel.is_set():
                raise CompileCancelled("the request was cancelled while its pattern compiled")
            if time.monotonic() > give_up_at:
                raise PatternError(f"the pattern took longer than the compile budget of "
                                   f"{budget.limits.compile_seconds} s (compile_seconds); make it simpler")
        try:
            return self.conn.recv()
        except EOFError:
            if self.killed:
                raise CompileCancelled("the pattern compiler was closed (the server is stopping)") from None
            raise RuntimeError(f"the pattern compiler's process ended (exit code {self.process.exitcode})") from None

    def kill(self, close_pipe: bool = True) -> None:
        """SIGKILL, and a short join to reap it: no waiting on a compile."""
        self.killed = True
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=1.0)
        if close_pipe:
            self.conn.close()


def _index_parts(index: TokenIndex) -> tuple:
    """What crosses back to the server: the DFA as numpy arrays and the masks built (not the vocabulary)."""
    dfa = index.dfa
    return (dfa.next_state.numpy(), dfa.accepting.numpy(), dfa.initial, dfa.char_states,
            dict(index._masks), index.build_seconds)  # same package: the packed masks, as TokenIndex keeps them


def _index_from_parts(parts: tuple, vocabulary: Vocabulary, model_vocab_size: int) -> TokenIndex:
    next_state, accepting, initial, char_states, masks, build_seconds = parts
    dfa = ByteDFA(torch.from_numpy(next_state), torch.from_numpy(accepting), initial, char_states)
    index = TokenIndex(dfa, vocabulary, model_vocab_size)
    index._masks.update(masks)
    index.build_seconds = build_seconds
    return index


def _serve(conn, token_bytes, eos_token_ids, model_vocab_size: int, parent_pid: int) -> None:
    """The worker's loop: one job at a time, until the pipe closes or the server is gone."""
    from miniyaie.structured.index_cache import build_index

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the server stops us
    threading.Thread(target=_exit_with, args=(parent_pid,), daemon=True).start()
    torch.set_num_threads(1)
    os.nice(WORKER_NICENESS)
    vocabulary = Vocabulary(token_bytes, tuple(eos_token_ids))
    vocabulary.byte_matrix()  # once, before the first job
    conn.send(("ready", None))
    while True:
        try:
            pattern, limits, seconds_left, keyword = conn.recv()
        except EOFError:
            return
        budget = Budget(limits)  # its messages name the operator's compile_seconds; its deadline is the request's
        budget.deadline = time.monotonic() + seconds_left
        try:
            index = build_index(pattern, budget, keyword, vocabulary, model_vocab_size)
            reply = ("index", _index_parts(index))
        except PatternError as exc:
            reply = ("pattern_error", str(exc))
        except Exception as exc:  # noqa: BLE001 - reported to the server, which raises it for the request
            reply = ("failed", f"{type(exc).__name__}: {exc}")
        conn.send(reply)


def _exit_with(parent_pid: int) -> None:
    """End this worker soon after its server is gone (killed, so it could not stop us)."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(0)
