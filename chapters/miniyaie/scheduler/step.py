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
        # Idea: only the last known token's logits predict a new token.
        # Stuck? `miniyaie hint 1.3` prints hints, one level at a time.
        # TODO(Task 1.3): Record a step's results. Replace this line with your code.
        raise NotImplementedError("Chapter 1, Task 3: Record a step's results — see book/src/ch01_scheduler.md")


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
