"""Admission rules: which waiting request goes next, and whether there is room to admit it; and the scheduler's settings."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from miniyaie.scheduler.request import Request

if TYPE_CHECKING:
    from miniyaie.scheduler.memory import KVMemory

PrefixLenOracle = Callable[[Request], int]


# ANCHOR: policies
def fcfs_order(waiting: Sequence[Request], prefix_len: PrefixLenOracle) -> list[Request]:
    """First come, first served: the queue order (preempted requests were put back in front)."""
    return list(waiting)


def lpm_order(waiting: Sequence[Request], prefix_len: PrefixLenOracle) -> list[Request]:
    """Longest prefix match (SGLang): requests with the most cached tokens first, as a new list.

    Requests that share a cached prefix run close together, so the prefix is
    still cached when they are admitted. Ties keep the queue order (not the
    arrival order: a preempted request waits at the front).
    """
    # Idea: two requests with the same cached prefix: which goes first, and what guarantees it?
    # Stuck? `miniyaie hint 1.6` prints hints, one level at a time.
    # TODO(Task 1.6): Longest-prefix-match order. Replace this line with your code.
    raise NotImplementedError('Chapter 1, Task 6: Longest-prefix-match order — see book/src/ch01_scheduler.md')
# ANCHOR_END: policies


POLICIES = {"fcfs": fcfs_order, "lpm": lpm_order}


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


# ANCHOR: fits_with_reserve
def fits_with_reserve(memory: KVMemory, running: Sequence[Request], request: Request, num_new: int, ratio: float) -> bool:
    """Whether memory can take the request's chunk of num_new tokens and still keep the decode reserve.

    `ratio` is SchedulerConfig.decode_reserve; the reserve is the one the
    chapter's page defines (the prompts still to prefill and `ratio` of the
    outputs still possible). With ratio == 0 it is exactly
    memory.can_allocate(request, num_new). Only memory.can_allocate may be
    asked (every KVMemory answers it); nothing is allocated. It sees
    requests, not the step: a running request's chunk scheduled earlier in
    this step is allocated already, yet still among its prompt tokens not
    computed (num_computed_tokens moves in update), so it is counted again.
    That is intended: the reserve errs on the safe side, by at most one
    step's budget. Example: ratio 0.5, nothing running, a 4-token prompt
    with max_tokens 6 asks whether it can grow by 4 + 3 when its chunk is
    the whole prompt, by 2 + 2 + 3 when the chunk is 2 tokens.
    """
    # Idea: admit only if the memory could also hold what the running requests will surely need.
    # Stuck? `miniyaie hint 1.2` prints hints, one level at a time.
    # TODO(Task 1.2): Admit waiting requests. Replace this line with your code.
    raise NotImplementedError('Chapter 1, Task 2: Admit waiting requests — see book/src/ch01_scheduler.md')
# ANCHOR_END: fits_with_reserve


# ANCHOR: admission_order
def admission_order(
    waiting: Sequence[Request], prefix_len: PrefixLenOracle, config: SchedulerConfig,
    queued_at: Callable[[Request], int], now: int,
) -> list[Request]:
    """The waiting requests in the order admission tries them, each once.

    FCFS: the queue order. LPM: an overdue request, one that has waited
    config.max_wait_steps schedules (queued_at(r) <= now - max_wait_steps;
    queued_at(r): the schedule count when r was added, now: this
    schedule's), comes before every request that has not, whatever the
    prefixes; short of that, longer cached prefixes first as lpm_order
    puts them. Nothing else reorders: the overdue keep the queue's order (a
    preempted request waits at its front), and so does a queue longer than
    config.lpm_max_queue, for which prefix_len is never called (asking
    every waiting request is not worth its cost). Example (asserted): LPM,
    max_wait_steps 2, now 5, the queue [a b c d] with prefix lengths
    0 1 0 3, queued at 4 3 1 2: [b c d a].
    """
    if config.policy == "fcfs":
        return fcfs_order(waiting, prefix_len)
    # Idea: sorting by prefix match can pass a request over forever: bound its wait, and the sort's cost.
    # Stuck? `miniyaie hint 1.6` prints hints, one level at a time.
    # TODO(Task 1.6): Longest-prefix-match order. Replace this line with your code.
    raise NotImplementedError('Chapter 1, Task 6: Longest-prefix-match order — see book/src/ch01_scheduler.md')
# ANCHOR_END: admission_order


def hold_shared_prefixes(
    order: Iterable[Request], running: Sequence[Request], prefix_len: PrefixLenOracle, block_size: int,
    on_hold: Callable[[], None],
) -> Iterator[Request]:
    """Yield `order` minus requests that would recompute a prefix another request is computing now.

    A leader is a running request still in its prompt, or one yielded
    before (admitted this step). A request is held (on_hold() is called)
    when its prompt shares with a leader's a whole block beyond what the
    cache already holds for it: once the leader's prefill is done the blocks
    are cached and the request starts after them.
    """
    leaders = [r.prompt_token_ids for r in running if r.num_computed_tokens < len(r.prompt_token_ids)]
    for request in order:
        prompt = request.prompt_token_ids
        want = min(prefix_len(request), len(prompt) - 1) // block_size * block_size + block_size
        if want < len(prompt) and any(leader[:want] == prompt[:want] for leader in leaders):
            on_hold()
            continue
        leaders.append(prompt)
        yield request
