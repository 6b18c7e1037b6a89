"""Admission rules: which waiting request goes next, and whether there is room to admit it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from miniyaie.scheduler.request import Request

if TYPE_CHECKING:
    from miniyaie.scheduler.memory import KVMemory
    from miniyaie.scheduler.step import SchedulerConfig

PrefixLenOracle = Callable[[Request], int]


# ANCHOR: policies
def fcfs_order(waiting: Sequence[Request], prefix_len: PrefixLenOracle) -> list[Request]:
    """First come, first served: the queue order (preempted requests were put back in front)."""
    return list(waiting)


def lpm_order(waiting: Sequence[Request], prefix_len: PrefixLenOracle) -> list[Request]:
    """Longest prefix match (SGLang): requests with the most cached tokens first, as a new list.

    Requests that share a cached prefix run close together, so the prefix is
    still cached when they are admitted. Ties keep the queue order.
    """
    # Idea: a stable sort keeps the queue order among equals.
    # Stuck? `miniyaie hint 1.6` prints hints, one level at a time.
    # TODO(Task 1.6): Longest-prefix-match order. Replace this line with your code.
    raise NotImplementedError('Chapter 1, Task 6: Longest-prefix-match order — see book/src/ch01_scheduler.md')
# ANCHOR_END: policies


POLICIES = {"fcfs": fcfs_order, "lpm": lpm_order}


# ANCHOR: fits_with_reserve
def fits_with_reserve(memory: KVMemory, running: Sequence[Request], request: Request, num_new: int, ratio: float) -> bool:
    """Whether memory can take the request's chunk of num_new tokens and still keep the decode reserve.

    `ratio` is SchedulerConfig.decode_reserve. With ratio == 0 that is
    memory.can_allocate(request, num_new).
    Otherwise the request must be able to grow by num_new + extra tokens,
    where extra = the prompt tokens still to prefill (of every running
    request, and of this one after this chunk) + int(ratio *
    the output tokens still to come: max_tokens - outputs so far of every
    running request, plus this request's max_tokens). Asked as "could
    this request grow by that much", so every KVMemory answers it.
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
    """The waiting requests in the order admission tries them.

    FCFS: the queue order. LPM: lpm_order, except that past
    config.lpm_max_queue waiting requests the queue order is used (sorting,
    and asking prefix_len of every waiting request, is not worth its cost:
    prefix_len is not called), and that requests queued at or before
    now - config.max_wait_steps (queued_at(r): the schedule count when r was
    added; now: the current one) go first, in queue order: no starvation.
    """
    if config.policy == "fcfs":
        return fcfs_order(waiting, prefix_len)
    # Idea: sorting by prefix match can pass a request over forever: bound its wait, and the sort's cost.
    # Stuck? `miniyaie hint 1.6` prints hints, one level at a time.
    # TODO(Task 1.6): Longest-prefix-match order. Replace this line with your code.
    raise NotImplementedError('Chapter 1, Task 6: Longest-prefix-match order — see book/src/ch01_scheduler.md')
    return order
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
