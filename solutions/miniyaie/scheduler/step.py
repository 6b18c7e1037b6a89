"""What one step of the scheduler decides (its settings, SchedulerConfig, live beside the admission rules in policy.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from miniyaie.scheduler.request import Request


# ANCHOR: batch
@dataclass(frozen=True)
class ScheduledChunk:
    """Tokens [start, start + num_tokens) of one request go through the model this step."""

    request: Request
    start: int  # position of the first token = num_computed_tokens before the step
    num_tokens: int

    @property
    def token_ids(self) -> list[int]:
        return self.request.all_token_ids[self.start : self.start + self.num_tokens]

    @property
    def samples_next_token(self) -> bool:
        """Whether the chunk reaches the end of its request's known tokens: then it yields the next token.

        Read after the step, before the sampled token is appended (update does).
        """
        # Nudge: only the last known token's logits predict a new token.
        # Hint 1: A chunk covers positions start .. start + num_tokens - 1; the model's output at
        #   the last known position (num_tokens - 1 of the request) is the next token's
        #   distribution. A chunk that stops short of it (a piece of a long prompt) has none.
        # Hint 2: Compare where the chunk ends with how many tokens the request knows.
        # Hint 3:
        #   return start + num_tokens == request.num_tokens
        # BEGIN SOLUTION 1.3: Record a step's results
        return self.start + self.num_tokens == self.request.num_tokens
        # END SOLUTION


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_batched_tokens(self) -> int:
        return sum(chunk.num_tokens for chunk in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks
# ANCHOR_END: batch
