"""A request as the scheduler sees it: tokens, progress, and where it is in its life."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, never run
    RUNNING = "running"  # holds KV memory, gets tokens every step
    PREEMPTED = "preempted"  # was running, memory taken back; queued again to recompute
    FINISHED = "finished"


class FinishReason(enum.Enum):
    STOP = "stop"  # an end-of-sequence token
    LENGTH = "length"  # max_tokens reached
    ABORT = "abort"  # cancelled by the client


_arrivals = itertools.count()


@dataclass(eq=False)
class Request:
    """One generation request.

    `num_computed_tokens` counts the tokens whose K/V are in the cache; the
    scheduler gives a request the tokens from there up to `num_tokens`
    (prompt + output so far). A prefill, a chunk of one, a prefix-cache hit and
    a decode step are all "the next tokens after num_computed_tokens".
    """

    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    eos_token_ids: Sequence[int] = ()
    ignore_eos: bool = False
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0  # leading tokens (prompt, and own output if resumed) found in the prefix cache at the last admission
    num_preemptions: int = 0
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: FinishReason | None = None
    arrival: int = field(default_factory=lambda: next(_arrivals))

    def __post_init__(self):
        if not self.prompt_token_ids:
            raise ValueError(f"request {self.request_id!r}: the prompt is empty")
        if self.max_tokens < 1:
            raise ValueError(f"request {self.request_id!r}: max_tokens must be at least 1, got {self.max_tokens}")

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def max_total_tokens(self) -> int:
        """The most tokens this request can ever hold in the cache."""
        return len(self.prompt_token_ids) + self.max_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED
