"""The engine: requests in, tokens out, one scheduled step at a time.

    add_request -> Scheduler.schedule -> ModelRunner.run -> Scheduler.update

The scheduler (chapter 1) decides who runs, the paged memory (chapter 2,
with the radix prefix cache of chapter 3 when enabled) holds their K/V, and
the model (chapter 0) computes over it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from miniyaie.engine.backends import make_attention_backend
from miniyaie.engine.config import EngineConfig
from miniyaie.engine.model_runner import ModelRunner
from miniyaie.model import CausalLM, Generation, PromptTooLongError, SamplingParams
from miniyaie.paged import PagedMemory, make_pool, num_blocks_for_budget
from miniyaie.radix import RadixMemory
from miniyaie.scheduler import Request, Scheduler, SchedulerConfig


@dataclass(frozen=True)
class RequestEvent:
    request_id: str
    token_id: int
    finish_reason: str | None  # "stop", "length", or None while running


class LLMEngine:
    def __init__(self, model: CausalLM, config: EngineConfig = EngineConfig()):
        self.model, self.config = model, config
        dtype, device = model.lm_head.weight.dtype, model.lm_head.weight.device
        num_blocks = config.num_blocks or num_blocks_for_budget(model.config, config.kv_cache_bytes, config.block_size, dtype)
        memory_class = RadixMemory if config.enable_prefix_caching else PagedMemory
        self.memory = memory_class(num_blocks, config.block_size)
        self.pool = make_pool(model.config, num_blocks, config.block_size, dtype, device)
        scheduler_config = SchedulerConfig(
            config.max_num_batched_tokens, config.max_num_seqs, config.policy,
            decode_reserve=config.decode_reserve, hold_shared_prefix=config.enable_prefix_caching,
        )
        self.scheduler = Scheduler(scheduler_config, self.memory)
        model.backend = make_attention_backend(config.attention_backend, device)
        self.runner = ModelRunner(model, self.pool, self.memory)
        self._params: dict[str, SamplingParams] = {}
        self._generators: dict[str, torch.Generator | None] = {}
        self._ids = itertools.count()
        self.counters = dict(
            steps=0, prompt_tokens=0, computed_tokens=0, cached_tokens=0, resumed_cached_tokens=0, max_used_blocks=0
        )

    # ------------------------------------------------------------ requests
    def add_request(
        self, prompt_token_ids: Sequence[int], params: SamplingParams, eos_token_ids: Sequence[int] = (), request_id: str | None = None
    ) -> str:
        """Queue a request; a bad one raises ValueError and changes nothing."""
        context = self.model.config.max_position_embeddings
        prompt = list(prompt_token_ids)
        if len(prompt) >= context:
            raise PromptTooLongError(f"prompt has {len(prompt)} tokens but the model's context is {context} tokens")
        if any(not 0 <= t < self.model.config.vocab_size for t in prompt):
            raise ValueError(f"prompt token ids must be in [0, {self.model.config.vocab_size})")
        request_id = request_id if request_id is not None else f"req-{next(self._ids)}"
        max_tokens = min(params.max_tokens, context - len(prompt))
        request = Request(request_id, prompt, max_tokens, eos_token_ids, params.ignore_eos)
        self.scheduler.add_request(request)  # raises, changing nothing, if it can never fit
        self._params[request_id] = params
        seeded = params.seed is not None
        self._generators[request_id] = torch.Generator(self.runner.device).manual_seed(params.seed) if seeded else None
        self.counters["prompt_tokens"] += len(prompt)
        return request_id

    def abort(self, request_id: str) -> bool:
        aborted = self.scheduler.abort(request_id) is not None
        self._forget(request_id)
        return aborted

    def _forget(self, request_id: str) -> None:
        self._params.pop(request_id, None)
        self._generators.pop(request_id, None)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ------------------------------------------------------------ one step
    # ANCHOR: step
    def step(self) -> list[RequestEvent]:
        """Schedule, run the model once, record the new tokens. Returns (request, token, finish) events."""
        was_running = {r.request_id for r in self.scheduler.running}
        out = self.scheduler.schedule()
        if out.is_empty:
            return []
        sampled = self.runner.run(out, self._params, self._generators)
        self.counters["steps"] += 1
        self.counters["computed_tokens"] += out.num_batched_tokens
        # A request admitted this step starts after its cached prefix: those tokens were not computed.
        # Prefix-cache hits count on a request's first admission only; a preempted request that finds
        # its own earlier work in the cache is counted apart (it is not another request's prefix).
        for c in out.chunks:
            if c.request.request_id not in was_running:
                key = "resumed_cached_tokens" if c.request.num_preemptions else "cached_tokens"
                self.counters[key] += c.start
        self.counters["max_used_blocks"] = max(self.counters["max_used_blocks"], self.memory.num_used_blocks)
        finished = {r.request_id: r.finish_reason.value for r in self.scheduler.update(out, sampled)}
        for rid in finished:
            self._forget(rid)
        return [RequestEvent(rid, token, finished.get(rid)) for rid, token in sampled.items()]
    # ANCHOR_END: step

    @property
    def stats(self) -> dict[str, int]:
        return {**self.counters, **self.scheduler.stats(), "used_blocks": self.memory.num_used_blocks}

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, eos_token_ids: Sequence[int] = ()
    ) -> list[Generation]:
        """Run every prompt to completion; outputs in prompt order."""
        ids = [self.add_request(p, params, eos_token_ids) for p in prompts]
        outputs = {rid: Generation([], "") for rid in ids}
        while self.has_unfinished():
            for event in self.step():
                if event.request_id in outputs:
                    outputs[event.request_id].token_ids.append(event.token_id)
                    if event.finish_reason:
                        outputs[event.request_id].finish_reason = event.finish_reason
        return [outputs[rid] for rid in ids]
