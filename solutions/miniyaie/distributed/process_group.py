"""Joining the ranks: torch.distributed process groups from torchrun's environment variables.

Two groups, two jobs:

- the data plane (the default group: NCCL on GPUs, gloo on CPU) carries the
  model's collectives, an all-reduce per half-block and an all-gather of the
  logits. It has a short timeout: a rank that dies or raises makes the others
  fail within it instead of waiting forever;
- the control plane (always gloo, on CPU) carries rank 0's step messages to
  the workers. A worker waits there while the engine is idle, so its timeout
  is long; a rank 0 that exits closes the connection and wakes it at once.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 60.0
CONTROL_TIMEOUT_S = 7 * 24 * 3600.0  # idle workers wait for the next step this long


@dataclass(frozen=True)
class TPGroup:
    """Which rank this process is, out of how many; world size 1 needs no process group."""

    rank: int = 0
    world_size: int = 1
    control: Any = None  # the gloo group of step messages (None at world size 1)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """x summed over the ranks (in place); x itself at world size 1."""
        if self.world_size > 1:
            dist.all_reduce(x)
        return x

    def all_gather_last_dim(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's x (all of one shape), concatenated along the last dimension in rank order."""
        if self.world_size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=-1)

    def broadcast_object(self, obj: Any = None) -> Any:
        """Rank 0's obj on every rank (pickled over the control plane); others pass nothing."""
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]


def backend_for(device: torch.device | str) -> str:
    """NCCL between GPUs, gloo between CPUs."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def join(rank: int, world_size: int, master_addr: str, master_port: int, device: torch.device | str = "cpu",
         timeout_s: float = DEFAULT_TIMEOUT_S) -> TPGroup:
    """Join the ranks at master_addr:master_port as `rank` of `world_size` (every rank calls this)."""
    if world_size == 1:
        return TPGroup()
    if dist.is_initialized():
        raise RuntimeError("this process is already in a process group: one tensor-parallel engine per process")
    if backend_for(device) == "nccl":  # NCCL talks from the current GPU: without this every rank would use GPU 0
        torch.cuda.set_device(torch.device(device).index if torch.device(device).index is not None else rank)
    dist.init_process_group(
        backend_for(device), init_method=f"tcp://{master_addr}:{master_port}", rank=rank, world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    control = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=CONTROL_TIMEOUT_S))
    return TPGroup(rank, world_size, control)


def join_from_env(device: torch.device | str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> TPGroup:
    """Join the group that torchrun describes: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT."""
    return join(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")),
                os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500")),
                device, timeout_s)


def leave() -> None:
    """Leave the process group (no-op outside one)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def free_port() -> int:
    """A TCP port nobody listens on now (for the rendezvous on one machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
