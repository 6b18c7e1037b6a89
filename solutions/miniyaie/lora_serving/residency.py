"""Adapters in memory while the engine serves: at most max_loras resident, loaded off the step, LRU eviction.

A request names its adapter (SamplingParams.adapter). If the adapter sits in a slot, the request queues
like any other. If not, the request is parked: out of the scheduler's queue (it holds no KV block and holds
up nobody) while a worker thread reads and checks the adapter's files. Between two steps the engine thread
copies the ready tensors into a free slot, or into the slot of the least recently used adapter that no
queued or running request uses, and the parked requests join the queue; while every slot's adapter is in
use, they wait. A load that fails (a file removed since the engine started) ends the requests that wait
for it with its error, and nothing else. S-LoRA and vLLM keep their adapters the same way.

Before each forward, every chunk's rows get its request's slot (-1: none) on the LoRABatch that the wrapped
projections share (layer.py). With the prefix cache on, the radix memory keys a request's tokens by its
adapter (RadixMemory.adapters): the same tokens under two adapters are different K/V.
"""

from __future__ import annotations

import itertools
import weakref
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from miniyaie.backends.cpu.decode_stack import CpuDecodeStack
from miniyaie.backends.cpu.decode_stack_lora import StackLoRA
from miniyaie.engine.admission import child_request_id
from miniyaie.engine.errors import RequestFailedError
from miniyaie.engine.outputs import RequestEvent
from miniyaie.lora.adapter import AdapterError, load_adapter
from miniyaie.lora.slots import GROUPS, NO_ADAPTER, LoRASlots
from miniyaie.lora.wrap import apply_lora

IDLE_WAIT_S = 0.05  # nothing to run but loads under way: the engine thread waits this long for one, then looks again


class AdapterResidency:
    """The engine's adapters: names and paths, the slots, the loads under way, the requests parked for them."""

    def __init__(self, engine, adapters: dict[str, str], max_loras: int, max_rank: int):
        """Checks every adapter's files against `engine`'s model now (AdapterError naming the first bad one),
        keeps none of their tensors, and wraps the model's projections (call after its backend is chosen)."""
        model = engine.model
        self.engine, self.paths, self.max_rank, self.model_config = engine, dict(adapters), max_rank, model.config
        for name, path in self.paths.items():
            load_adapter(path, self.model_config, max_rank, name)
        weights = next(model.parameters())
        self.device = weights.device
        self.slots = LoRASlots(self.model_config, max_loras, max_rank, weights.dtype, weights.device)
        self.batch = apply_lora(model, self.slots)
        self.decode_stack_refused = self._serve_in_decode_stack(model)
        # request id (every completion) -> its adapter; the radix memory keys its tokens by the same dict
        self.adapter_of: dict[str, str] = getattr(engine.memory, "adapters", {})
        self.requests: Counter[str] = Counter()  # requests admitted, per adapter
        self._parked: dict[str, object] = {}  # request id -> its Request, waiting for its adapter (arrival order)
        self._loads: dict[str, Future] = {}  # adapter -> its load (read and checked on the worker), until installed
        self._last_used: dict[str, int] = {}  # resident adapter -> the clock of the last step that ran it
        self._clock = itertools.count()
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="miniyaie-lora-load")
        weakref.finalize(self, self._loader.shutdown, wait=False)
        engine.counters.update(lora_loads=0, lora_evictions=0, lora_load_failures=0)

    @property
    def waiting(self) -> bool:
        """Whether requests are parked until their adapter is loaded (the engine has work even if the scheduler has none)."""
        return bool(self._parked)

    def admit(self, request_id: str, params) -> None:
        """A request just added to the scheduler with `params.adapter`: its completions are keyed by the adapter, and
        it is parked (out of the queue) with its adapter's load started unless the adapter is resident."""
        name = params.adapter
        self.requests[name] += 1
        for rid in [request_id] + [child_request_id(request_id, i) for i in range(1, params.n)]:
            self.adapter_of[rid] = name
        if self.slots.slot_of(name) is not None:
            return
        request = self.engine.scheduler.requests[request_id]
        self.engine.scheduler.waiting.remove(request)
        self._parked[request_id] = request
        if name not in self._loads:
            self._loads[name] = self._loader.submit(load_adapter, self.paths[name], self.model_config, self.max_rank, name)

    def forget(self, request_id: str) -> None:
        """A completion ended (its blocks are back): drop its adapter and its place among the parked."""
        self.adapter_of.pop(request_id, None)
        self._parked.pop(request_id, None)

    def before_schedule(self) -> list[RequestEvent]:
        """Between two steps, on the engine thread: end the requests of failed loads (their events carry the error),
        install the ready adapters their parked requests want, and, with nothing else to run, wait a moment for a load."""
        if not self._loads:
            return []
        events = self._fail_broken_loads()
        self._install_ready()
        wanted = {self.adapter_of[rid] for rid in self._parked}
        for name in [name for name, load in self._loads.items() if load.done() and name not in wanted]:
            del self._loads[name]  # its requests ended while it loaded
        if self._parked and not self.engine.scheduler.has_unfinished():
            under_way = [load for load in self._loads.values() if not load.done()]
            if under_way:
                wait(under_way, timeout=IDLE_WAIT_S, return_when=FIRST_COMPLETED)
        return events

    def set_step(self, out) -> None:
        """The rows of the step `out` (a SchedulerOutput) get their request's slot, before the forward."""
        now, slot_of_chunk = next(self._clock), []
        for chunk in out.chunks:
            name = self.adapter_of.get(chunk.request.request_id)
            slot = NO_ADAPTER if name is None else self.slots.slot_of(name)
            if slot is None:
                raise RuntimeError(f"request {chunk.request.request_id!r} runs with adapter {name!r}, which is in no slot")
            if name is not None:
                self._last_used[name] = now
            slot_of_chunk.append(slot)
        self.batch.set_sequences(slot_of_chunk, [chunk.num_tokens for chunk in out.chunks], self.device)

    def stats(self) -> dict:
        """What /stats shows under "lora": settings, the slots' bytes, resident adapters, loads, evictions, requests per adapter."""
        c = self.engine.counters
        return {"adapters": list(self.paths), "max_loras": self.slots.num_slots, "max_lora_rank": self.max_rank,
                "slot_bytes": self.slots.num_slots * self.slots.bytes_per_slot,  # what the slots hold, resident or not
                "resident": [name for name in list(self.slots.names) if name is not None],
                "loads": c["lora_loads"], "evictions": c["lora_evictions"], "load_failures": c["lora_load_failures"],
                "waiting_for_adapter": len(self._parked), "requests": {name: self.requests[name] for name in self.paths}}

    def _serve_in_decode_stack(self, model) -> str | None:
        """Hand the slots to the engine's CPU decode stack, which then adds the deltas of its decode steps itself
        (backends/cpu/decode_stack_lora.py); why it does not (its steps then run layer by layer), or None."""
        stack = self.engine.runner.decode_graphs
        if not isinstance(stack, CpuDecodeStack):
            return "the engine has no CPU decode stack"
        groups = [[(self.slots.a[group][:, layer], [self.slots.b[module][:, layer] for module in group]) for group in GROUPS]
                  for layer in range(self.model_config.num_layers)]  # GROUPS: the stack's order, q/k/v, o, gate/up, down
        return stack.serve_lora(StackLoRA(groups, self.slots.scaling, self.batch.active, model.ops,
                                          base=lambda projection: projection.base))

    def _fail_broken_loads(self) -> list[RequestEvent]:
        events = []
        for name, load in list(self._loads.items()):
            if not load.done() or load.exception() is None:
                continue
            del self._loads[name]
            self.engine.counters["lora_load_failures"] += 1
            exc = load.exception()
            why = str(exc) if isinstance(exc, AdapterError) else f"adapter {name!r}: loading failed: {type(exc).__name__}: {exc}"
            for rid in [rid for rid in self._parked if self.adapter_of.get(rid) == name]:
                self.engine.abort(rid)  # it computed nothing and holds no block; its id is free again
                error = RequestFailedError(why)
                error.__cause__ = exc
                events.append(RequestEvent(rid, -1, None, error=error))
        return events

    def _install_ready(self) -> None:
        for name in dict.fromkeys(self.adapter_of[rid] for rid in self._parked):  # wanted, oldest request first
            load = self._loads.get(name)
            if load is None or not load.done():
                continue
            slot = self._free_slot()
            if slot is None:
                return  # every slot's adapter is in use by queued or running requests: the parked ones wait
            self.slots.load(slot, load.result())
            del self._loads[name]
            self.engine.counters["lora_loads"] += 1
            self._last_used[name] = next(self._clock)
            for rid in [rid for rid in self._parked if self.adapter_of[rid] == name]:
                self.engine.scheduler.waiting.append(self._parked.pop(rid))

    def _free_slot(self) -> int | None:
        """An empty slot, or the slot of the least recently used adapter no queued or running request uses (evicted)."""
        names = self.slots.names
        if None in names:
            return names.index(None)
        scheduler = self.engine.scheduler
        in_use = {self.adapter_of.get(r.request_id) for r in (*scheduler.running, *scheduler.waiting)}
        idle = [slot for slot, name in enumerate(names) if name not in in_use]
        if not idle:
            return None
        slot = min(idle, key=lambda s: self._last_used.get(names[s], -1))
        self._last_used.pop(names[slot], None)
        self.slots.unload(slot)
        self.engine.counters["lora_evictions"] += 1
        return slot
