"""Admission order: which waiting request goes next."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from miniyaie.scheduler.request import Request

PrefixLenOracle = Callable[[Request], int]


# ANCHOR: policies
def fcfs_order(waiting: Sequence[Request], prefix_len: PrefixLenOracle) -> list[Request]:
    """First come, first served: the queue order (preempted requests were put back in front)."""
    return list(waiting)


def lpm_order(waiting: Sequence[Request], prefix_len: PrefixLenOracle) -> list[Request]:
    """Longest prefix match (SGLang): requests with the most cached prompt tokens first.

    Requests that share a cached prefix run close together, so the prefix is
    still cached when they are admitted. Ties keep the queue order.
    """
    # Hint: sorted() is stable; sort by the negated cached prefix length.
    # BEGIN SOLUTION 1.5: Longest-prefix-match order
    return sorted(waiting, key=lambda request: -prefix_len(request))
    # END SOLUTION
# ANCHOR_END: policies


POLICIES = {"fcfs": fcfs_order, "lpm": lpm_order}
