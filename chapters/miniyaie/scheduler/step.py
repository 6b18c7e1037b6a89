"""What the scheduler is configured with, and what one step of it decides."""

from __future__ import annotations

from dataclasses import dataclass, field

from miniyaie.scheduler.policy import POLICIES
from miniyaie.scheduler.request import Request


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 512  # the token budget of one step
    max_num_seqs: int = 64  # running requests at most
    policy: str = "fcfs"  # or "lpm"
    # Admission headroom (SGLang's new-token ratio, vLLM's watermark): admit a request only if the
    # memory could still hold the prompts being prefilled and this fraction of the output tokens every
    # running request (and this one) may yet produce. 0 = admit as soon as the chunk fits (chapter 1's
    # rule); 1 = never preempt.
    decode_reserve: float = 0.0
    # LPM sorts the whole queue by prefix match every step; past this queue length use FCFS (SGLang: 128).
    lpm_max_queue: int = 128
    # LPM may pass a request over; after this many schedules in the queue it goes first (no starvation).
    max_wait_steps: int = 256
    # With a prefix cache: hold a request whose prompt shares a block more than its cached prefix with a
    # request being prefilled, until that prefix is cached (SGLang's in-batch prefix check).
    hold_shared_prefix: bool = False
    # A long prefill shares the step (vLLM's --long-prefill-token-threshold, --max-long-partial-prefills):
    # a request with more than this many tokens still to compute gets at most this many a step, and at most
    # max_long_partial_prefills such requests get tokens in one step, until everyone else has been served;
    # then the rest of the budget goes back to them (long_prefill.py). 0 = no bound (chapter 1's plain rule).
    long_prefill_token_threshold: int = 0
    max_long_partial_prefills: int = 1

    def __post_init__(self):
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError("max_num_batched_tokens and max_num_seqs must be at least 1")
        if not 0 <= self.decode_reserve <= 1:
            raise ValueError(f"decode_reserve must be in [0, 1], got {self.decode_reserve}")
        if self.long_prefill_token_threshold < 0 or self.max_long_partial_prefills < 1:
            raise ValueError(
                f"long_prefill_token_threshold must be >= 0 and max_long_partial_prefills >= 1, got "
                f"{self.long_prefill_token_threshold} and {self.max_long_partial_prefills}"
            )
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose from {sorted(POLICIES)}")


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
