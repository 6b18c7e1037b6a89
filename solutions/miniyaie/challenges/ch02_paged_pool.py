"""Chapter 2's challenge: serve a batch of requests from a small pool in the least simulated time.

Your levers, in your `miniyaie/paged/challenge.py`: `make_memory(capacity_tokens)` returning a
PagedMemory over that many token slots (the block size is yours: small blocks waste less of the
pool, but every block a step reads costs time), and `make_scheduler(memory)` (admission headroom,
batch size: a pool that fills preempts, and a preempted request computes its tokens again; or a
Scheduler subclass whose `_admission_order` picks the order waiting requests are tried in).
The reference's entry is its own pair, in solutions/miniyaie/paged/challenge.py (the reference column runs it).
Scored in simulated time (simulate.py's step cost + BLOCK_MS per block a step reads), the mean over
SEEDS batches so that a design tuned to one batch's luck gains nothing: deterministic.
"""

from __future__ import annotations

import random

from miniyaie.challenges.base import Challenge, learner_design
from miniyaie.challenges.simulate import VOCAB, TraceRequest, simulate

CAPACITY_TOKENS = 6144
BLOCK_MS = 0.004  # reading one block's K/V in attention: per block of a request's table a step touches
REQUESTS = 64
SEEDS = (0, 1, 2, 3, 4)  # the score is the mean over these batches


def batch_trace(seed: int = 0) -> list[TraceRequest]:
    rng = random.Random(seed)
    return [TraceRequest(0.0, [rng.randrange(1, VOCAB) for _ in range(rng.randint(50, 400))], rng.randint(50, 300))
            for _ in range(REQUESTS)]


def blocks_read(out, memory) -> float:
    """BLOCK_MS for every block each scheduled chunk's attention reads (its table up to the chunk's end)."""
    size = memory.block_size
    return BLOCK_MS * sum(-(-(c.start + c.num_tokens) // size) for c in out.chunks)


def plain_memory(capacity_tokens: int):
    from miniyaie.paged import PagedMemory

    return PagedMemory(capacity_tokens // 16, 16)


def plain_scheduler(memory):
    from miniyaie.scheduler import Scheduler, SchedulerConfig

    return Scheduler(SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=64), memory)


def serve_seconds(make_memory, make_scheduler) -> float:
    from miniyaie.scheduler import Request

    total_ms = 0.0
    for seed in SEEDS:
        memory = make_memory(CAPACITY_TOKENS)
        if memory.capacity_tokens > CAPACITY_TOKENS:
            raise ValueError(f"make_memory built {memory.capacity_tokens} token slots; the pool has {CAPACITY_TOKENS}")
        total_ms += simulate(make_scheduler, memory, batch_trace(seed=seed), Request, extra_cost=blocks_read).makespan_ms
    return total_ms / len(SEEDS) / 1000


CHALLENGE = Challenge(
    number=2,
    title="serve a batch from a small pool in the least simulated time",
    metric="time to serve the batch, mean of 5 batches",
    unit="simulated s",
    higher_is_better=False,
    workload=(f"{REQUESTS} requests at once, prompts of 50-400 tokens, 50-300 output tokens each, one batch for each "
              f"seed 0-4 (the score is their mean); a pool of {CAPACITY_TOKENS} token slots; a step costs 20 ms + "
              f"0.5 ms a request + 0.25 ms a token + {BLOCK_MS} ms a block read"),
    run=lambda: serve_seconds(learner_design(2, "make_memory", plain_memory), learner_design(2, "make_scheduler", plain_scheduler)),
    baseline=lambda: serve_seconds(plain_memory, plain_scheduler),
    correctness_tests=["tests/ch02_paged_kv_cache"],
)
