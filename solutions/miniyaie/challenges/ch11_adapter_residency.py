"""Chapter 11's challenge: which adapter is read first, which stays in the slots, on a skewed, bursty trace.

Your lever: a `make_policy(num_slots, ranks)` in your `miniyaie/lora/challenge.py`, returning an object with
the methods of `LRU` below, the engine's own rule (lora_serving/residency.py) and the baseline. What no
policy changes, as in the engine: a request whose adapter is not resident waits out of the queue; one
worker reads adapters, LOAD_MS_PER_RANK ms per unit of rank; between two steps a read adapter goes into an
empty slot or replaces a resident one that no queued or running request uses; the slots are your
`LoRASlots`. Score: the mean simulated ms a request with an adapter waits for it (deterministic).
The reference's entry is its own make_policy, in solutions/miniyaie/lora/challenge.py (the reference column runs it).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from miniyaie.challenges.base import Challenge, learner_design
from miniyaie.challenges.simulate import step_cost_ms

NUM_ADAPTERS, NUM_SLOTS, RANKS, LOAD_MS_PER_RANK = 40, 8, (8, 16, 32, 64), 8.0
MAX_ROWS, TOKEN_BUDGET, DURATION_MS = 16, 512, 120_000.0
BACKGROUND_PER_S, BURST_EVERY_MS = 2.5, 8000.0


@dataclass
class _Request:
    arrival_ms: float
    adapter: str | None
    prompt: int
    max_tokens: int
    ready_ms: float | None = None  # when its adapter was resident and it joined the queue
    prefill_left: int = 0
    outputs: int = 0


def adapter_ranks(seed: int = 0) -> dict[str, int]:
    rng = random.Random(seed)
    return {f"a{i:02d}": rng.choice(RANKS) for i in range(NUM_ADAPTERS)}


def _poisson(rng: random.Random, per_ms: float) -> list[float]:
    times = [rng.expovariate(per_ms)]
    while times[-1] < DURATION_MS:
        times.append(times[-1] + rng.expovariate(per_ms))
    return times[:-1]


def trace(seed: int = 0) -> list[_Request]:
    """Background requests over Zipf-popular adapters (a tenth without one), and bursts of one random adapter."""
    rng = random.Random(seed + 1)
    names = list(adapter_ranks(seed))
    rng.shuffle(names)  # popularity is not tied to rank
    weights = [1 / (i + 1) for i in range(len(names))]
    make = lambda t, name: _Request(t, name, rng.randint(32, 256), rng.randint(8, 64))  # noqa: E731
    requests = [make(t, None if rng.random() < 0.1 else rng.choices(names, weights)[0])
                for t in _poisson(rng, BACKGROUND_PER_S / 1000)]
    for t in _poisson(rng, 1 / BURST_EVERY_MS):  # a customer's batch job: many requests for one adapter at once
        name = rng.choice(names)
        requests.extend(make(t + rng.uniform(0, 300), name) for _ in range(rng.randint(8, 24)))
    return sorted(requests, key=lambda r: r.arrival_ms)


class LRU:
    """The baseline, the engine's rule: read in the order asked, evict the least recently run, read nothing ahead.

    The simulation calls, all with the simulated clock `now_ms`:
      on_arrival(adapter, now_ms)      a request for `adapter` arrived (resident or not)
      on_step(adapters, now_ms)        a step ran rows of these adapters (a set of names)
      next_read(waiting, now_ms)       the worker is free: which adapter to read next, one of `waiting` (adapters
                                       asked for and not read, first asked first -> requests waiting for each)
      victim(idle, now_ms)             an adapter is read and no slot is empty: which of `idle` (resident, used
                                       by no queued or running request) to replace, or None to wait a step
      prefetch(resident, now_ms)       the worker is idle: an adapter to read ahead (not resident), or None
    """

    def __init__(self, num_slots: int, ranks: dict[str, int]):
        self.last_step: dict[str, float] = {}

    def on_arrival(self, adapter: str, now_ms: float) -> None:
        pass

    def on_step(self, adapters: set[str], now_ms: float) -> None:
        for name in adapters:
            self.last_step[name] = now_ms

    def next_read(self, waiting: dict[str, int], now_ms: float) -> str:
        return next(iter(waiting))

    def victim(self, idle: list[str], now_ms: float) -> str | None:
        return min(idle, key=lambda name: self.last_step.get(name, -1.0))

    def prefetch(self, resident: list[str], now_ms: float) -> str | None:
        return None


def _slots(ranks: dict[str, int]):
    """Your chapter's LoRASlots for a one-layer toy model, and each adapter as a LoRAAdapter of its rank."""
    import torch

    from miniyaie.lora.adapter import LoRAAdapter
    from miniyaie.lora.slots import LoRASlots
    from miniyaie.model.config import ModelConfig

    config = ModelConfig(family="llama", vocab_size=64, hidden_size=8, intermediate_size=16, num_layers=1, num_heads=2,
                         num_kv_heads=1, head_dim=4, rms_norm_eps=1e-6, max_position_embeddings=64, rope_theta=1e4)
    gen = torch.Generator().manual_seed(0)
    adapters = {name: LoRAAdapter(name, rank, 2.0, {(0, "q_proj"): (torch.randn(rank, 8, generator=gen),
                                                                   torch.randn(8, rank, generator=gen))})
                for name, rank in ranks.items()}
    return LoRASlots(config, NUM_SLOTS, max(RANKS)), adapters


class _Engine:
    """The engine's rules in simulated time; `policy` decides which adapter is read next, evicted, read ahead."""

    def __init__(self, policy, ranks: dict[str, int]):
        self.policy, self.ranks = policy, ranks
        self.slots, self.adapters = _slots(ranks)
        self.parked: list[_Request] = []  # waiting for their adapter, in arrival order
        self.queue, self.running = [], []  # admitted, in arrival order; in the batch
        self.asked: list[str] = []  # adapters asked for, not resident, not read yet (first asked first)
        self.reading: tuple[str, float] | None = None  # (adapter, when its read ends): the one worker
        self.read: list[str] = []  # read, waiting for a slot

    def arrive(self, request: _Request) -> None:
        request.prefill_left = request.prompt
        if request.adapter is not None:
            self.policy.on_arrival(request.adapter, request.arrival_ms)
        if request.adapter is None or self.slots.slot_of(request.adapter) is not None:
            request.ready_ms = request.arrival_ms
            self.queue.append(request)
            return
        self.parked.append(request)
        name = request.adapter
        if name not in self.asked and name not in self.read and (self.reading is None or self.reading[0] != name):
            self.asked.append(name)
        if self.reading is None:
            self.start_read(request.arrival_ms)

    def start_read(self, now: float) -> None:
        """The worker is free at `now`: the policy picks which asked-for adapter it reads next."""
        if not self.asked:
            return
        waiting = {name: sum(r.adapter == name for r in self.parked) for name in self.asked}
        name = self.policy.next_read(dict(waiting), now)
        if name not in waiting:
            raise ValueError(f"next_read returned {name!r}, which is not one of the adapters asked for {list(waiting)}")
        self.asked.remove(name)
        self.reading = (name, now + LOAD_MS_PER_RANK * self.ranks[name])

    def end_read(self) -> None:
        name, end = self.reading
        self.read.append(name)
        self.reading = None
        self.start_read(end)

    def install(self, now: float) -> None:
        """Between two steps: what was read goes into a slot, the adapters of the oldest parked requests first."""
        wanted = list(dict.fromkeys(r.adapter for r in self.parked))
        for name in [n for n in wanted if n in self.read] + [n for n in self.read if n not in wanted]:
            slot = self._slot_for(now)
            if slot is None:
                if name in wanted:
                    return  # every slot's adapter is in use (or the policy waits): the parked requests wait
                self.read.remove(name)  # read ahead, and nowhere to go: dropped
                continue
            self.slots.load(slot, self.adapters[name])
            if self.slots.slot_of(name) != slot:
                raise RuntimeError(f"LoRASlots.load put {name!r} in slot {slot}, but slot_of({name!r}) disagrees")
            self.read.remove(name)
            for request in [r for r in self.parked if r.adapter == name]:
                self.parked.remove(request)
                request.ready_ms = now
                self.queue.append(request)

    def _slot_for(self, now: float) -> int | None:
        names = self.slots.names
        if None in names:
            return names.index(None)
        in_use = {r.adapter for r in (*self.queue, *self.running)}
        idle = [name for name in names if name not in in_use]
        if not idle:
            return None
        name = self.policy.victim(list(idle), now)
        if name is None:
            return None
        if name not in idle:
            raise ValueError(f"victim returned {name!r}, which is not one of the idle adapters {idle}")
        slot = self.slots.slot_of(name)
        self.slots.unload(slot)
        return slot

    def read_ahead(self, now: float) -> None:
        ahead = self.policy.prefetch([n for n in self.slots.names if n is not None], now)
        if ahead is not None and ahead not in self.ranks:
            raise ValueError(f"prefetch returned {ahead!r}, which is not one of the adapters")
        if ahead is not None and self.slots.slot_of(ahead) is None and ahead not in self.read:
            self.reading = (ahead, now + LOAD_MS_PER_RANK * self.ranks[ahead])

    def step(self, now: float) -> float:
        """One step: admit in arrival order up to MAX_ROWS; decodes take a token, prefills the budget left."""
        while self.queue and len(self.running) < MAX_ROWS:
            self.running.append(self.queue.pop(0))
        budget, rows, tokens = TOKEN_BUDGET, [], 0
        for request in self.running:
            take = 1 if request.prefill_left == 0 else min(request.prefill_left, budget)
            if take <= 0:
                continue
            budget, tokens = budget - take, tokens + take
            rows.append((request, take))
        now += step_cost_ms(len(rows), tokens)
        self.policy.on_step({r.adapter for r, _ in rows if r.adapter is not None}, now)
        for request, take in rows:
            if request.prefill_left:
                request.prefill_left -= take
                if request.prefill_left:
                    continue
            request.outputs += 1
            if request.outputs == request.max_tokens:
                self.running.remove(request)
        return now


def mean_wait_ms(make_policy) -> float:
    """Serve the trace in simulated time with `make_policy(NUM_SLOTS, ranks)`: the mean wait for an adapter."""
    ranks = adapter_ranks()
    engine, pending = _Engine(make_policy(NUM_SLOTS, dict(ranks)), ranks), trace()
    clock, i = 0.0, 0
    while i < len(pending) or engine.parked or engine.queue or engine.running or engine.asked or engine.reading:
        while True:  # arrivals and the ends of reads up to now, in time order
            arrival = pending[i].arrival_ms if i < len(pending) else math.inf
            read_end = engine.reading[1] if engine.reading else math.inf
            if min(arrival, read_end) > clock:
                break
            if arrival <= read_end:
                engine.arrive(pending[i])
                i += 1
            else:
                engine.end_read()
        engine.install(clock)
        if engine.reading is None and i < len(pending):
            engine.read_ahead(clock)
        if engine.queue or engine.running:
            clock = engine.step(clock)
            continue
        arrival = pending[i].arrival_ms if i < len(pending) else math.inf
        next_event = min(arrival, engine.reading[1] if engine.reading else math.inf)
        if next_event == math.inf:
            raise RuntimeError("requests wait for adapters that nothing reads or installs: the policy's victim "
                               "returned None with nothing running, so they would wait forever")
        clock = max(clock, next_event)
    waits = [r.ready_ms - r.arrival_ms for r in pending if r.adapter is not None]
    return sum(waits) / len(waits)


CHALLENGE = Challenge(
    number=11,
    title="which adapters stay resident and which load first, on a skewed, bursty trace",
    metric="mean wait of a request for its adapter",
    unit="ms (simulated)",
    higher_is_better=False,
    workload=(f"{DURATION_MS / 1000:.0f} simulated seconds, seed 0: {BACKGROUND_PER_S:g} requests/s over "
              f"{NUM_ADAPTERS} adapters of rank 8-64 (Zipf popularity, a tenth with none) and a burst of 8-24 "
              f"requests for one random adapter every {BURST_EVERY_MS / 1000:g} s on average; {NUM_SLOTS} slots, "
              f"one reader at {LOAD_MS_PER_RANK:g} ms per unit of rank, steps of up to {MAX_ROWS} rows"),
    run=lambda: mean_wait_ms(learner_design(11, "make_policy", LRU)),
    baseline=lambda: mean_wait_ms(LRU),
    correctness_tests=["tests/ch11_lora/test_slots.py"],
    learner_may_import=("LRU",),  # the page: subclass LRU
    extra={"baseline_label": "the engine's rule: read in the order asked, evict the least recently run"},
    note=("Deterministic: the same on every machine. The slots are your LoRASlots; the rules no policy changes "
          "(a request waits out of the queue, one reader, an adapter in use is never evicted) are the engine's."),
)
