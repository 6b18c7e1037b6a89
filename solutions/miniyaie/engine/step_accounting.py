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
        # Nudge: a hit of the prompt and a preempted request finding its own work are different facts.
        # Hint 1: The scheduler admits a request at the first token the cache does not hold, so the
        #   start of its first chunk is what the cache gave it. Only a request's first admission
        #   says something about the prompt cache; a preempted request that comes back finds its
        #   own prompt and output in the cache (that is preemption being cheap, not a hit), and
        #   counting it would let "cached prompt tokens" exceed the prompt itself.
        # Hint 2: For each chunk of a request not in was_running: if its request was preempted,
        #   add c.start to resumed_cached_tokens; else add it to this step's total and set
        #   self._prompt_cached[its id] = c.start. Add the total to counters["cached_tokens"] and
        #   return it.
        # Hint 3:
        #   cached = 0
        #   for c in out.chunks: if id not in was_running:
        #       if c.request.num_preemptions: counters["resumed_cached_tokens"] += c.start
        #       else: cached += c.start; self._prompt_cached[id] = c.start
        #   counters["cached_tokens"] += cached; return cached
        # BEGIN SOLUTION 5.11: The engine step
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
        # END SOLUTION

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
        # Nudge: every number here is one a test or a plot adds up; each is counted once, where it happens.
        # Hint 1: A decode is a chunk of one token that starts past the end of its prompt; every
        #   other computed token is prefill work (a prompt's chunk, or a recomputation after
        #   preemption). The record is only built when someone listens (on_step), since building
        #   it every step costs time for nobody.
        # Hint 2: decode_tokens = chunks with num_tokens == 1 and start >= len(prompt). Update the
        #   five counters. If self.on_step is not None, call it with StepRecord(step number,
        #   started, elapsed, chunks, prefill = batched - decode, decode, cached, sampled,
        #   preempted, running, waiting, used blocks now).
        # Hint 3:
        #   decode = sum(1 for c in out.chunks if c.num_tokens == 1 and c.start >= len(c.request.prompt_token_ids))
        #   counters: steps += 1; computed_tokens += out.num_batched_tokens; max_used_blocks = max(...);
        #             output_tokens += len(sampled); finished_requests += len(finished)
        #   if self.on_step: self.on_step(StepRecord(counters["steps"], started, perf_counter() - started, len(out.chunks), ...))
        # BEGIN SOLUTION 5.11: The engine step
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
        # END SOLUTION
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

