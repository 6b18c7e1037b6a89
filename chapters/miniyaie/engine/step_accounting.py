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

        `was_running`: the ids running before this step was scheduled. Afterwards:
        - counters["cached_tokens"] is, over every request admitted so far, the prompt tokens the
          prefix cache gave it the first time it was admitted; it never exceeds the prompt
          tokens, and it agrees with the events (self._prompt_cached[id] is that number for
          request id, and what its events report);
        - counters["resumed_cached_tokens"] is, over every admission after a preemption, the
          tokens the request found again in the cache (its own earlier work, not a prompt hit);
        - the value returned is this step's share of counters["cached_tokens"].
        """
        # Idea: a hit of the prompt and a preempted request finding its own work are different facts.
        # Stuck? `miniyaie hint 5.11` prints hints, one level at a time.
        # TODO(Task 5.11): The engine step. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 11: The engine step — see book/src/ch05_engine_loop.md')

    def _count_step(self, out: SchedulerOutput, started: float, used_blocks: int, cached: int,
                    sampled: dict[str, SampledToken], finished: dict[str, str]) -> None:
        """The step's counters and, when self.on_step is set, its StepRecord.

        After every step the counters read: "steps" the steps taken (empty schedules are no
        step); "computed_tokens" the tokens computed (out.num_batched_tokens, over all steps);
        "max_used_blocks" the most blocks used in any step (used_blocks is this step's);
        "output_tokens" the tokens sampled; "finished_requests" the completions that ended
        normally (stop, length, a stop string), never an abort. The StepRecord (outputs.py, its fields) describes this step
        alone: a decode token is the single token of a chunk that extends a request past its
        prompt; every other computed token is prefill; queues and blocks are as the step left
        them. The records' tokens add up to the counters.
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

