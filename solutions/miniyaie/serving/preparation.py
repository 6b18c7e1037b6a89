"""Preparing requests off the event loop: chat template, tokens, checks and pattern compiles on worker threads.

One event loop serves every connection: /health, new requests and the
chunks of every running stream. Anything slow done on it stops them all,
and a structured-output pattern may take seconds to compile (up to its
budget). So a route hands the slow half of admitting its request to a
worker thread and awaits it; meanwhile the loop goes on serving.

    route ── prepare(request, jobs) ──> worker: job(cancel) for each prompt ──> PreparedRequests
      └── the client hangs up first: cancel is set (the compile stops soon), 499;
          a result that still arrives is released (its held pattern dropped)
    server stopping ── stop() ──> every cancel set: no compile holds up shutdown

Two small pools, so that a plain request never queues behind compiles:
plain requests (a template and a tokenizer: milliseconds) on PLAIN_WORKERS
threads, constrained ones on COMPILE_WORKERS. Compiling is pure Python, so
the server compiles in worker processes (Preparation asks the engine to:
serving/compile_process.py): a compile thread only waits for its worker
and holds no GIL the engine thread and the event loop need. Two let one
slow pattern not hold up the next; each costs a process while it compiles.
A constrained request that finds both busy waits in the queue, in its own
state, never in the engine step. The threads are daemons: a job still
running at exit does not keep the process alive.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future

from miniyaie.engine.prepared import PreparedRequest
from miniyaie.serving.compile_process import ProcessCompiler
from miniyaie.structured import CompileCancelled

PLAIN_WORKERS = 4
COMPILE_WORKERS = 2
PrepareJob = Callable[[threading.Event], PreparedRequest]  # job(cancel): runs on a worker thread
WaitUnlessDisconnected = Callable[[object, Awaitable], Awaitable]  # (request, awaitable) -> its result, or raises if the client left


class WorkerPool:
    """A few daemon threads running jobs in the order they came; started on the first job."""

    def __init__(self, workers: int, name: str):
        self.workers, self.name = workers, name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable, *args) -> Future:
        future: Future = Future()
        with self._lock:
            while len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True)
                thread.start()
                self._threads.append(thread)
        self._jobs.put((future, fn, args))
        return future

    def close(self) -> None:
        """Let the threads end once the jobs before this call are done."""
        with self._lock:
            for _ in self._threads:
                self._jobs.put(None)
            self._threads = []

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():  # its caller gave up while it queued
                continue
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting route through the future
                future.set_exception(exc)
            else:
                future.set_result(result)


class Preparation:
    """The server's preparation of requests: off the event loop, cancelled when the client leaves or the server stops."""

    def __init__(self, engine, wait: WaitUnlessDisconnected, shutting_down: Callable[[], Exception],
                 plain_workers: int = PLAIN_WORKERS, compile_workers: int = COMPILE_WORKERS):
        """`wait` and `shutting_down` are the server's own (chapter 6): how a route waits while watching its
        client, and the error a request gets once the server is stopping."""
        self.engine, self.wait, self.shutting_down = engine, wait, shutting_down
        engine.compile_in_process(ProcessCompiler)  # patterns compile in worker processes: off this process's GIL
        self._plain = WorkerPool(plain_workers, "miniyaie-prepare")
        self._compile = WorkerPool(compile_workers, "miniyaie-compile")
        self._cancels: set[threading.Event] = set()  # one per preparation in flight (event loop thread only)
        self.stopping = False

    async def prepare(self, request, jobs: Sequence[PrepareJob], constrained: bool) -> list[PreparedRequest]:
        """Every job's PreparedRequest, run in order on a worker thread (a compile pool if `constrained`).

        All or nothing: if a job raises, the ones before it are released and its error comes up as it is.
        ClientDisconnected if the client hangs up first: the cancel event is set, and whatever the
        worker still produces is released. A 503 once the server is stopping.
        """
        if self.stopping:
            raise self.shutting_down()
        cancel = threading.Event()
        self._cancels.add(cancel)
        future = (self._compile if constrained else self._plain).submit(self._prepare_all, jobs, cancel)
        try:
            return await self.wait(request, asyncio.wrap_future(future))
        except CompileCancelled:  # while the route still waits, only stop() cancels
            raise self.shutting_down() from None
        except BaseException:
            cancel.set()  # the client left, or the route was cancelled: stop the compile
            future.add_done_callback(self._release_result)  # runs now if the future is done, else when it is
            raise
        finally:
            self._cancels.discard(cancel)

    def stop(self) -> None:
        """Cancel every preparation in flight and refuse new ones (the server is shutting down)."""
        self.stopping = True
        for cancel in list(self._cancels):
            cancel.set()

    def close(self) -> None:
        """At the server's exit: cancel what is in flight, let the threads end, kill the compile workers now
        (uvicorn re-raises SIGTERM once it has shut down: the process ends without running its `finally`s)."""
        self.stop()
        self._plain.close()
        self._compile.close()
        self.engine.close_compile_workers()

    def _prepare_all(self, jobs: Sequence[PrepareJob], cancel: threading.Event) -> list[PreparedRequest]:
        done: list[PreparedRequest] = []
        try:
            for job in jobs:
                done.append(job(cancel))
        except BaseException:
            for prepared in done:
                self.engine.release(prepared)
            raise
        return done

    def _release_result(self, future: Future) -> None:
        """A preparation nobody will submit: drop what it holds."""
        if not future.cancelled() and future.exception() is None:
            for prepared in future.result():
                self.engine.release(prepared)
