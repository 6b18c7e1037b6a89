"""The engine's counters: what each step admitted, computed, sampled and held (LLMEngine's stats).

Kept apart from llm_engine.py, which is the step itself; every counter here
is a fact the tests and the book's measurements read (cache hits, blocks,
forks, tokens).
"""

from __future__ import annotations

import time

from miniyaie.engine.outputs import StepRecord
from miniyaie.engine.sampler import SampledToken
from miniyaie.scheduler import SchedulerOutput


class StepAccounting:
    """Mixed into LLMEngine: needs self.counters, self.scheduler, self.memory, self.on_step, self._prompt_cached."""

    def _note_admissions(self, out: SchedulerOutput, was_running: set[str]) -> int:
        """Prompt tokens the prefix cache gave requests admitted this step (first admissions only:
        a preempted request that finds its own earlier work in the cache is counted apart)."""
        cached = 0
        for c in out.chunks:
            if c.request.request_id not in was_running:
                if c.request.num_preemptions:
                    self.counters["resumed_cached_tokens"] += c.start
                else:
                    cached += c.start
                    self._prompt_cached[c.request.request_id] = c.start
        self.counters["cached_tokens"] += cached
        return cached

    def _count_step(self, out: SchedulerOutput, started: float, used_blocks: int, cached: int,
                    sampled: dict[str, SampledToken], finished: dict[str, str]) -> None:
        """The step's counters and, when tracing, its StepRecord."""
        decode_tokens = sum(1 for c in out.chunks if c.num_tokens == 1 and c.start >= len(c.request.prompt_token_ids))
        self.counters["steps"] += 1
        self.counters["computed_tokens"] += out.num_batched_tokens
        self.counters["max_used_blocks"] = max(self.counters["max_used_blocks"], used_blocks)
        self.counters["output_tokens"] += len(sampled)
        self.counters["finished_requests"] += len(finished)
        if self.on_step is not None:
            self.on_step(StepRecord(
                self.counters["steps"], started, time.perf_counter() - started, len(out.chunks),
                out.num_batched_tokens - decode_tokens, decode_tokens, cached, len(sampled), len(out.preempted),
                len(self.scheduler.running), len(self.scheduler.waiting), self.memory.num_used_blocks,
            ))

    @property
    def num_request_blocks(self) -> int:
        """Blocks some request holds. The rest of the used blocks only keep the prefix cache (evictable)."""
        tables = list(self.memory.tables.values())  # one C-level copy: safe while the engine thread steps
        return len({block for table in tables for block in table})

    @property
    def stats(self) -> dict[str, int]:
        return {**self.counters, **self.scheduler.stats(), "used_blocks": self.memory.num_used_blocks,
                "request_blocks": self.num_request_blocks, "free_blocks": self.memory.num_free_blocks}

