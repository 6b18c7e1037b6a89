"""Rank 0 schedules, the workers replay its model calls.

    rank 0 (this process)                        ranks 1..N-1 (spawned processes)
    LLMEngine: scheduler, paged memory, radix     load_rank_model, a pool of the
    ParallelModelRunner.forward ── Step ──────>   same blocks, ModelRunner.forward
         model step  <── all-reduce, all-gather ──>   model step
    sample (rank 0 only)

Only rank 0 has a scheduler, a block allocator and a radix tree: the block
tables are the same on every rank, because every rank's pool has the same
number of blocks and only rank 0 hands them out. A worker needs, per step,
just what `ModelRunner.forward` takes plus the copy-on-write block copies.
"""

from __future__ import annotations

import logging
import multiprocessing
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from miniyaie.distributed.process_group import DEFAULT_TIMEOUT_S, TPGroup, free_port, join, leave
from miniyaie.distributed.shard_loader import load_rank_model
from miniyaie.distributed.sharding import check_tensor_parallel_size
from miniyaie.backends.choose import use_backend
from miniyaie.engine.errors import EngineError
from miniyaie.engine.model_runner import ModelRunner
from miniyaie.model import AttentionMetadata, CausalLM
from miniyaie.model.loader import read_config
from miniyaie.paged import copy_blocks, make_pool

log = logging.getLogger("miniyaie.distributed")


class TensorParallelError(EngineError):
    """A rank failed (raised, died or timed out); the engine cannot compute any more steps."""


@dataclass
class WorkerSetup:
    """What a worker needs to mirror rank 0's engine, sent once after rank 0 sized its pool."""

    num_blocks: int
    block_size: int
    attention_backend: str


@dataclass
class Step:
    """One model call, as rank 0 made it (tensors on the CPU while they travel)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    logit_rows: list[int]
    block_copies: list[tuple[int, int]]

    def to(self, device: torch.device) -> Step:
        meta = replace(self.meta, slot_mapping=self.meta.slot_mapping.to(device),
                       block_tables=self.meta.block_tables.to(device))
        return replace(self, input_ids=self.input_ids.to(device), positions=self.positions.to(device), meta=meta)


class ParallelModelRunner(ModelRunner):
    """Rank 0's runner: prepares the batch as in chapter 5, then has every rank run it."""

    def __init__(self, model: CausalLM, pool, memory, group: TPGroup):
        super().__init__(model, pool, memory)
        self.group = group
        self.failure: BaseException | None = None
        self._copies: list[tuple[int, int]] = []

    # ANCHOR: parallel_runner
    def prepare(self, out):
        """Chapter 5's batch, with this step's copy-on-write copies kept for the workers.

        The copies are applied to this rank's pool here (as chapter 5's
        prepare would) and remembered in self._copies, for `forward` to send.
        """
        # Idea: the copy-on-write copies can be taken only once: which pools need them, and how do the workers learn of them?
        # Stuck? `miniyaie hint 7.4` prints hints, one level at a time.
        # TODO(Task 7.4): Rank 0 schedules, the workers replay. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 4: Rank 0 schedules, the workers replay — see book/src/ch07_tensor_parallel.md')

    def forward(self, input_ids, positions, meta, logit_rows):
        """The same forward on every rank: the workers get the step, then all ranks compute it together.

        A failure of any collective (a rank died, raised or timed out) means
        the ranks are out of step for good: it is kept in self.failure and
        raised as TensorParallelError, now and on every later step; a later
        step raises at once, without a message to any rank. The error's
        message says "tensor-parallel rank failed" and names the failure (its
        type and message): the engine hands it to the step's requests.
        """
        # Idea: a worker can only replay what it is told; and once a collective has failed, none can be trusted.
        # Stuck? `miniyaie hint 7.4` prints hints, one level at a time.
        # TODO(Task 7.4): Rank 0 schedules, the workers replay. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 4: Rank 0 schedules, the workers replay — see book/src/ch07_tensor_parallel.md')
    # ANCHOR_END: parallel_runner

    def check_health(self) -> None:
        """Raise TensorParallelError once any step has failed; None while healthy.

        Its message, like forward's, says "tensor-parallel rank failed" and names the failure.
        """
        # Idea: what did forward keep when a collective failed?
        # Stuck? `miniyaie hint 7.4` prints hints, one level at a time.
        # TODO(Task 7.4): Rank 0 schedules, the workers replay. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 4: Rank 0 schedules, the workers replay — see book/src/ch07_tensor_parallel.md')


# ANCHOR: attach_engine
def attach_engine(llm, group: TPGroup, attention_backend: str) -> None:
    """Make rank 0's LLMEngine parallel: the workers (in `serve_as_worker`) get a WorkerSetup, its runner drives them.

    `llm` is chapter 5's LLMEngine on rank 0's shard (its `model`, `pool` of `pool.num_slots` slots
    and `memory`); afterwards `llm.runner` is a ParallelModelRunner over them.
    """
    # Idea: what must a worker know, once, before rank 0's first step can name its blocks?
    # Stuck? `miniyaie hint 7.4` prints hints, one level at a time.
    # TODO(Task 7.4): Rank 0 schedules, the workers replay. Replace this line with your code.
    raise NotImplementedError('Chapter 7, Task 4: Rank 0 schedules, the workers replay — see book/src/ch07_tensor_parallel.md')
# ANCHOR_END: attach_engine


# ANCHOR: worker_loop
def replay_steps(group: TPGroup, runner: ModelRunner, block_size: int) -> int:
    """A worker's loop: run each step rank 0 broadcasts, until it sends None; returns the number of steps run.

    The worker's runner has no memory and no scheduler: the step carries the
    block copies and everything `ModelRunner.forward` takes.
    """
    # Idea: a worker has no scheduler: everything it does, it was told.
    # Stuck? `miniyaie hint 7.4` prints hints, one level at a time.
    # TODO(Task 7.4): Rank 0 schedules, the workers replay. Replace this line with your code.
    raise NotImplementedError('Chapter 7, Task 4: Rank 0 schedules, the workers replay — see book/src/ch07_tensor_parallel.md')
# ANCHOR_END: worker_loop


# ANCHOR: serve_as_worker
def serve_as_worker(group: TPGroup, model: CausalLM, device: str | torch.device = "cpu") -> int:
    """A worker's life after loading: rank 0's WorkerSetup, a pool like rank 0's, then `replay_steps`.

    Returns the number of steps replayed; 0 when rank 0 sends None instead
    of a setup (it gave up during start-up).
    """
    # Idea: what does this worker's pool share with rank 0's, and what is its own?
    # Stuck? `miniyaie hint 7.4` prints hints, one level at a time.
    # TODO(Task 7.4): Rank 0 schedules, the workers replay. Replace this line with your code.
    raise NotImplementedError('Chapter 7, Task 4: Rank 0 schedules, the workers replay — see book/src/ch07_tensor_parallel.md')
# ANCHOR_END: serve_as_worker


def _worker_main(rank: int, world_size: int, port: int, path: str, dtype: torch.dtype, device: str,
                 timeout_s: float) -> None:
    """A worker process: join, load this rank's shard, mirror rank 0's pool, replay its steps."""
    device = f"cuda:{rank}" if device == "cuda" else device
    group = join(rank, world_size, "127.0.0.1", port, device, timeout_s)
    try:
        serve_as_worker(group, load_rank_model(Path(path), group, dtype, device), device)
    except Exception:
        log.exception("tensor-parallel rank %d failed", rank)
        raise
    finally:
        leave()


class TensorParallelRuntime:
    """The N-1 worker processes and rank 0's shard of the model, for one engine in this process."""

    def __init__(self, group: TPGroup, model: CausalLM, workers: list):
        self.group, self.model, self.workers = group, model, workers

    @classmethod
    def start(cls, path: Path, world_size: int, dtype: torch.dtype = torch.float32, device: str = "cpu",
              timeout_s: float = DEFAULT_TIMEOUT_S) -> TensorParallelRuntime:
        """Spawn ranks 1..N-1 on this machine, join them as rank 0 and load rank 0's shard."""
        config = read_config(Path(path))
        check_tensor_parallel_size(config.num_heads, config.num_kv_heads, world_size)
        context = multiprocessing.get_context("spawn")
        port = free_port()
        workers = [context.Process(target=_worker_main, name=f"miniyaie-tp-rank{rank}", daemon=True,
                                   args=(rank, world_size, port, str(path), dtype, device, timeout_s))
                   for rank in range(1, world_size)]
        for worker in workers:
            worker.start()
        try:
            group = join(0, world_size, "127.0.0.1", port, "cuda:0" if device == "cuda" else device, timeout_s)
        except BaseException:
            _stop(workers)
            raise
        try:
            model = load_rank_model(Path(path), group, dtype, "cuda:0" if device == "cuda" else device)
        except BaseException:
            runtime = cls(group, None, workers)
            runtime.close()
            raise
        return cls(group, model, workers)

    def attach(self, llm, attention_backend: str) -> None:
        """Give rank 0's engine its parallel runner, and the workers a pool like its pool."""
        attach_engine(llm, self.group, attention_backend)

    def close(self, timeout_s: float = 10.0) -> None:
        """Tell the workers to stop, wait for them (then stop them), leave the group."""
        try:
            self.group.broadcast_object(None)
        except Exception as exc:  # a worker already gone: it cannot be told; it is stopped below
            log.warning("could not tell the tensor-parallel workers to stop: %s", exc)
        _stop(self.workers, timeout_s)
        leave()


def _stop(workers: list, timeout_s: float = 10.0) -> None:
    for worker in workers:
        worker.join(timeout_s)
        if worker.is_alive():
            worker.terminate()
            worker.join()
