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
        # Nudge: the copy-on-write copies can be taken only once: which pools need them, and how do the workers learn of them?
        # Hint 1: Copy-on-write (chapter 2) queues block copies in the memory; whoever takes them
        #   must apply them, and every rank's pool needs them, since every rank's pool holds the
        #   same blocks (its own heads). Take them before chapter 5's prepare would.
        # Hint 2: Take the queued copies from self.memory, apply them to self.pool with copy_blocks
        #   (chapter 2), and keep the list in self._copies; then chapter 5's prepare finds none.
        # Hint 3:
        #   self._copies = self.memory.take_block_copies()
        #   copy_blocks(self.pool, self._copies, self.memory.block_size)
        #   return super().prepare(out)
        # BEGIN SOLUTION 7.4: Rank 0 schedules, the workers replay
        self._copies = self.memory.take_block_copies()
        copy_blocks(self.pool, self._copies, self.memory.block_size)
        return super().prepare(out)
        # END SOLUTION

    def forward(self, input_ids, positions, meta, logit_rows):
        """The same forward on every rank: the workers get the step, then all ranks compute it together.

        A failure of any collective (a rank died, raised or timed out) means
        the ranks are out of step for good: it is kept in self.failure and
        raised as TensorParallelError, now and on every later step; a later
        step raises at once, without a message to any rank. The error's
        message says "tensor-parallel rank failed" and names the failure (its
        type and message): the engine hands it to the step's requests.
        """
        # Nudge: a worker can only replay what it is told; and once a collective has failed, none can be trusted.
        # Hint 1: The workers wait in group.broadcast_object for the next Step; once every rank
        #   has it, all ranks run ModelRunner.forward together (its collectives pair up). Send
        #   the step before computing, or rank 0 waits in its first all-reduce for workers that
        #   wait for the step. An exception from either means a rank is gone or out of step.
        # Hint 2: Build Step(input_ids, positions, meta, list(logit_rows), self._copies) on the CPU
        #   (.to(torch.device("cpu"))); broadcast it; return chapter 5's forward (super()). Wrap
        #   both in try/except Exception: keep the exception in self.failure and raise
        #   TensorParallelError (with what happened) from it.
        # Hint 3:
        #   step = Step(...).to(cpu)
        #   try: broadcast(step); return super().forward(input_ids, positions, meta, logit_rows)
        #   except Exception as exc: self.failure = exc; raise TensorParallelError(...) from exc
        # BEGIN SOLUTION 7.4: Rank 0 schedules, the workers replay
        self.check_health()
        step = Step(input_ids, positions, meta, list(logit_rows), self._copies).to(torch.device("cpu"))
        try:
            self.group.broadcast_object(step)
            return super().forward(input_ids, positions, meta, logit_rows)
        except Exception as exc:
            self.failure = exc
            raise TensorParallelError(f"a tensor-parallel rank failed: {type(exc).__name__}: {exc}") from exc
        # END SOLUTION
    # ANCHOR_END: parallel_runner

    def check_health(self) -> None:
        """Raise TensorParallelError once any step has failed; None while healthy.

        Its message, like forward's, says "tensor-parallel rank failed" and names the failure.
        """
        # Nudge: what did forward keep when a collective failed?
        # Hint 1: A failed collective leaves the ranks out of step for good: every later check fails.
        # Hint 2: If self.failure is set, raise TensorParallelError naming its type and message.
        # Hint 3:
        #   if self.failure is not None: raise TensorParallelError(f"... {type(failure).__name__}: {failure}")
        # BEGIN SOLUTION 7.4: Rank 0 schedules, the workers replay
        if self.failure is not None:
            raise TensorParallelError(f"a tensor-parallel rank failed earlier: {type(self.failure).__name__}: {self.failure}")
        # END SOLUTION


# ANCHOR: attach_engine
def attach_engine(llm, group: TPGroup, attention_backend: str) -> None:
    """Make rank 0's LLMEngine parallel: the workers (in `serve_as_worker`) get a WorkerSetup, its runner drives them.

    `llm` is chapter 5's LLMEngine on rank 0's shard (its `model`, `pool` of `pool.num_slots` slots
    and `memory`); afterwards `llm.runner` is a ParallelModelRunner over them.
    """
    # Nudge: what must a worker know, once, before rank 0's first step can name its blocks?
    # Hint 1: Rank 0's block tables name blocks of rank 0's pool; a worker's pool must have the
    #   same blocks (count and size) for those names to mean the same slots, and the same
    #   attention backend to compute the same way. After that, rank 0's engine runs through a
    #   runner that sends each step.
    # Hint 2: Broadcast a WorkerSetup of the engine's memory (num_blocks, block_size) and the
    #   backend name; then replace llm.runner with a ParallelModelRunner over the engine's model,
    #   pool and memory.
    # Hint 3:
    #   group.broadcast_object(WorkerSetup(llm.memory.num_blocks, llm.memory.block_size, backend))
    #   llm.runner = ParallelModelRunner(llm.model, llm.pool, llm.memory, group)
    # BEGIN SOLUTION 7.4: Rank 0 schedules, the workers replay
    group.broadcast_object(WorkerSetup(llm.memory.num_blocks, llm.memory.block_size, attention_backend))
    llm.runner = ParallelModelRunner(llm.model, llm.pool, llm.memory, group)
    # END SOLUTION
# ANCHOR_END: attach_engine


# ANCHOR: worker_loop
def replay_steps(group: TPGroup, runner: ModelRunner, block_size: int) -> int:
    """A worker's loop: run each step rank 0 broadcasts, until it sends None; returns the number of steps run.

    The worker's runner has no memory and no scheduler: the step carries the
    block copies and everything `ModelRunner.forward` takes.
    """
    # Nudge: a worker has no scheduler: everything it does, it was told.
    # Hint 1: Each message is a Step (or None: stop). Replaying it means doing exactly what
    #   rank 0 did to its pool and model in that step, in the same order: first the block
    #   copies, then the forward (whose collectives meet rank 0's). Count the steps.
    # Hint 2: Loop on group.broadcast_object() until it returns None; move the step to
    #   runner.device (step.to), copy_blocks(runner.pool, step.block_copies, block_size),
    #   then runner.forward(step.input_ids, step.positions, step.meta, step.logit_rows).
    # Hint 3:
    #   steps = 0
    #   while (step := group.broadcast_object()) is not None:
    #       step = step.to(runner.device); copy_blocks(...); runner.forward(...); steps += 1
    #   return steps
    # BEGIN SOLUTION 7.4: Rank 0 schedules, the workers replay
    steps = 0
    while (step := group.broadcast_object()) is not None:
        step = step.to(runner.device)
        copy_blocks(runner.pool, step.block_copies, block_size)
        runner.forward(step.input_ids, step.positions, step.meta, step.logit_rows)
        steps += 1
    return steps
    # END SOLUTION
# ANCHOR_END: worker_loop


# ANCHOR: serve_as_worker
def serve_as_worker(group: TPGroup, model: CausalLM, device: str | torch.device = "cpu") -> int:
    """A worker's life after loading: rank 0's WorkerSetup, a pool like rank 0's, then `replay_steps`.

    Returns the number of steps replayed; 0 when rank 0 sends None instead
    of a setup (it gave up during start-up).
    """
    # Nudge: what does this worker's pool share with rank 0's, and what is its own?
    # Hint 1: The block count and size are rank 0's (its block tables must mean the same slots
    #   here); the heads and dtype are this rank's model's (its local config: only its KV
    #   heads). The backend is the one rank 0 uses.
    # Hint 2: Receive the setup (None: return 0). use_backend(model, setup.attention_backend,
    #   device); make_pool(model.config, setup.num_blocks, setup.block_size, the model's dtype,
    #   device); replay_steps with a ModelRunner over the model and that pool, memory None.
    # Hint 3:
    #   setup = group.broadcast_object(); if setup is None: return 0
    #   use_backend(...); pool = make_pool(model.config, ..., model.lm_head.weight.dtype, device)
    #   return replay_steps(group, ModelRunner(model, pool, memory=None), setup.block_size)
    # BEGIN SOLUTION 7.4: Rank 0 schedules, the workers replay
    setup = group.broadcast_object()
    if setup is None:  # rank 0 gave up during start-up
        return 0
    use_backend(model, setup.attention_backend, device)
    dtype = model.lm_head.weight.dtype
    pool = make_pool(model.config, setup.num_blocks, setup.block_size, dtype, device)
    return replay_steps(group, ModelRunner(model, pool, memory=None), setup.block_size)
    # END SOLUTION
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
