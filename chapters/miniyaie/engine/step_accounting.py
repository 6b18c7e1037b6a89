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

    # ANCHOR: accounting
    def _note_admissions(self, out: SchedulerOutput, was_running: set[str]) -> int:
        """Count the prefix cache's hits of this step; returns the prompt tokens it gave (for the StepRecord).

        A request admitted this step (not in `was_running`) whose first chunk starts at c.start > 0
        found c.start tokens in the prefix cache. On its first admission they are a hit of its
        prompt: added to counters["cached_tokens"] and remembered in self._prompt_cached[id] (its
        events report it). A request coming back after preemption (request.num_preemptions > 0)
        finds its own earlier work there instead: that goes to counters["resumed_cached_tokens"]
        alone, so that cached_tokens never exceeds the prompt tokens and agrees with the events.
        """
        # Idea: a hit of the prompt and a preempted request finding its own work are different facts.
        # Stuck? `miniyaie hint 5.11` prints hints, one level at a time.
        # TODO(Task 5.11): The engine step. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 11: The engine step — see book/src/ch05_engine_loop.md')

    def _count_step(self, out: SchedulerOutput, started: float, used_blocks: int, cached: int,
                    sampled: dict[str, SampledToken], finished: dict[str, str]) -> None:
        """The step's counters and, when self.on_step is set, its StepRecord.

        counters: "steps" + 1; "computed_tokens" + the batch's tokens (out.num_batched_tokens);
        "max_used_blocks" the largest used_blocks seen; "output_tokens" + the tokens sampled;
        "finished_requests" + the requests finished. The StepRecord (outputs.py) splits the
        batch's tokens into decode tokens (a chunk of one token past its prompt) and prefill
        tokens (the rest), and reports the queues and the blocks as they are after the step.
        """
        # Idea: every number here is one a test or a plot adds up; each is counted once, where it happens.
        # Stuck? `miniyaie hint 5.11` prints hints, one level at a time.
        # TODO(Task 5.11): The engine step. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 11: The engine step — see book/src/ch05_engine_loop.md')
    # ANCHOR_END: accounting

    @property
    def num_request_blocks(self) -> int:
        """Blocks some request holds. The rest of the used blocks only keep the prefix cache (evictable)."""
        tables = list(self.memory.tables.values())  # one C-level copy: safe while the engine thread steps
        return len({block for table in tables for block in table})

    @property
    def stats(self) -> dict[str, int]:
        return {**self.counters, **self.scheduler.stats(), "used_blocks": self.memory.num_used_blocks,
                "request_blocks": self.num_request_blocks, "free_blocks": self.memory.num_free_blocks}

