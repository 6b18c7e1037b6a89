"""A step-cost model for the scheduler challenges: simulated milliseconds, the same on every machine.

A step that computes T tokens for R requests costs STEP_MS + R * REQUEST_MS + T * TOKEN_MS
(a fixed launch/weight-read cost, a per-row cost, a per-token cost: the shape of a CPU
step of chapter 5's engine, scaled). The "model" is a fixed function of the tokens.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

STEP_MS, REQUEST_MS, TOKEN_MS = 20.0, 0.5, 0.25
VOCAB = 50


@dataclass(frozen=True)
class TraceRequest:
    arrival_ms: float
    prompt: list[int]
    max_tokens: int


@dataclass
class SimResult:
    ttft_ms: list[float]  # per request, arrival to the end of the step that sampled its first token
    makespan_ms: float
    output_tokens: int
    preemptions: int

    @property
    def throughput(self) -> float:  # output tokens per simulated second
        return 1000 * self.output_tokens / self.makespan_ms


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (deterministic, no interpolation)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def step_cost_ms(num_requests: int, num_tokens: int) -> float:
    return STEP_MS + num_requests * REQUEST_MS + num_tokens * TOKEN_MS


def bursty_trace(seed: int = 0) -> list[TraceRequest]:
    """Chat requests in bursts, with long document prompts arriving among them (fixed by `seed`)."""
    rng = random.Random(seed)
    trace = []
    for burst in range(8):
        start = burst * 1500.0
        for i in range(rng.randint(6, 12)):  # a burst of short chat turns
            trace.append(TraceRequest(start + rng.uniform(0, 100), [rng.randrange(1, VOCAB) for _ in range(rng.randint(20, 80))],
                                      rng.randint(16, 48)))
        for i in range(rng.randint(1, 2)):  # a long document to summarise
            trace.append(TraceRequest(start + rng.uniform(0, 200), [rng.randrange(1, VOCAB) for _ in range(rng.randint(1500, 3000))],
                                      rng.randint(32, 64)))
    return sorted(trace, key=lambda r: r.arrival_ms)


def simulate(make_scheduler, memory, trace: list[TraceRequest], request_cls, max_steps: int = 100_000,
             extra_cost=None) -> SimResult:
    """Drive `make_scheduler(memory)` over `trace` in simulated time; a fake model gives the tokens.

    `extra_cost(out, memory)`, when given, adds milliseconds to a step (read before the step's update).
    """
    scheduler = make_scheduler(memory)
    pending = list(trace)
    arrival, first = {}, {}
    clock, steps, outputs = 0.0, 0, 0
    while pending or scheduler.has_unfinished():
        while pending and pending[0].arrival_ms <= clock:
            t = pending.pop(0)
            rid = f"r{len(arrival)}"
            arrival[rid] = t.arrival_ms
            scheduler.add_request(request_cls(rid, list(t.prompt), t.max_tokens, ignore_eos=True))
        if not scheduler.has_unfinished():
            clock = pending[0].arrival_ms
            continue
        out = scheduler.schedule()
        clock += step_cost_ms(len(out.chunks), out.num_batched_tokens)
        if extra_cost is not None:
            clock += extra_cost(out, memory)
        sampled = {}
        for c in out.chunks:
            if c.samples_next_token:
                tokens = c.request.all_token_ids
                sampled[c.request.request_id] = (sum(tokens[-8:]) * 31 + len(tokens)) % (VOCAB - 1) + 1
                first.setdefault(c.request.request_id, clock)
        outputs += len(sampled)
        scheduler.update(out, sampled)
        steps += 1
        if steps > max_steps:
            raise RuntimeError(f"the scheduler did not finish the trace in {max_steps} steps")
    ttft = [first[rid] - arrival[rid] for rid in arrival]
    return SimResult(ttft, clock, outputs, getattr(scheduler, "num_preemptions", 0))
