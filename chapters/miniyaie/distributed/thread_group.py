"""N ranks as N threads of one process: the collectives of TPGroup, met at a barrier.

What the tests and the notebook use to watch tensor parallelism without
starting processes: every rank runs in its own thread, and each collective
is an exchange through shared slots. Each rank tags what it puts in its
slot with the collective it is in, so ranks that call different
collectives at the same point (one broadcasting a step while another
all-reduces) fail at once with a message naming both, instead of reading
each other's values. The arithmetic is the same as gloo's (sum in rank
order, concatenate in rank order); the engine itself runs on real process
groups (process_group.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from miniyaie.distributed.process_group import TPGroup


class CollectiveMismatchError(RuntimeError):
    """Ranks met in different collectives: the ranks are out of step (a bug in whoever calls them)."""


class ThreadRanks:
    """The shared state of world_size thread ranks; `run` calls fn(group, *args) on each."""

    def __init__(self, world_size: int, timeout_s: float = 60.0):
        self.world_size = world_size
        self.barrier = threading.Barrier(world_size, timeout=timeout_s)
        self.slots: list[Any] = [None] * world_size

    def group(self, rank: int) -> ThreadGroup:
        return ThreadGroup(rank, self.world_size, ranks=self)

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """fn(group_r, *args) in one thread per rank; their results in rank order, or the first rank's error."""
        results: list[Any] = [None] * self.world_size
        errors: list[BaseException | None] = [None] * self.world_size

        def body(rank: int) -> None:
            try:
                results[rank] = fn(self.group(rank), *args)
            except BaseException as exc:  # noqa: BLE001 -- re-raised below, after every rank stopped
                errors[rank] = exc
                self.barrier.abort()  # the others fail at their next collective instead of waiting

        threads = [threading.Thread(target=body, args=(rank,), name=f"rank{rank}") for rank in range(self.world_size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        first = next((e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)), None)
        first = first or next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return results


@dataclass(frozen=True)
class ThreadGroup(TPGroup):
    ranks: ThreadRanks | None = field(default=None, repr=False)

    def _exchange(self, kind: str, value: Any) -> list[Any]:
        self.ranks.slots[self.rank] = (kind, value)
        self.ranks.barrier.wait()  # everyone has written
        tagged = list(self.ranks.slots)
        self.ranks.barrier.wait()  # everyone has read: the slots may be reused
        kinds = [k for k, _ in tagged]
        if any(k != kind for k in kinds):
            where = ", ".join(f"rank {r} in {k}" for r, k in enumerate(kinds))
            raise CollectiveMismatchError(
                f"rank {self.rank}: the ranks called different collectives at the same point ({where}); "
                f"every rank must make the same collective calls in the same order")
        return [v for _, v in tagged]

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        values = self._exchange("all_reduce", x.clone())
        total = values[0]
        for value in values[1:]:
            total = total + value
        return x.copy_(total)

    def all_gather_last_dim(self, x: torch.Tensor) -> torch.Tensor:
        values = self._exchange("all_gather_last_dim", x)
        shapes = {tuple(v.shape) for v in values}
        if len(shapes) > 1:
            raise RuntimeError(f"all_gather needs one shape from every rank, got {sorted(shapes)}")
        return torch.cat(values, dim=-1)

    def broadcast_object(self, obj: Any = None) -> Any:
        return self._exchange("broadcast_object", obj)[0]
