"""Process-group setup: torchrun's environment variables, or a spawn helper for one machine.

Every collective runs with a timeout so that a rank that dies or raises makes
the others fail loudly instead of waiting forever.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class TPGroup:
    """Which rank this process is, out of how many (world_size 1 needs no process group)."""

    rank: int = 0
    world_size: int = 1

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum x over the ranks in place; a no-op at world size 1."""
        if self.world_size > 1:
            dist.all_reduce(x)
        return x

    def all_gather_last_dim(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate every rank's x along the last dimension (rank order)."""
        if self.world_size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=-1)


def backend_for(device: torch.device) -> str:
    """NCCL for CUDA tensors, gloo for CPU ones."""
    return "nccl" if device.type == "cuda" else "gloo"


def init_from_env(device: torch.device | str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> TPGroup:
    """Join the process group described by RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun's)."""
    device = torch.device(device)
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(
            backend_for(device), rank=rank, world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return TPGroup(rank, world_size)


def free_port() -> int:
    """A TCP port nobody listens on now (for MASTER_PORT on one machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, fn: Callable[..., Any], args: tuple, timeout_s: float) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    group = init_from_env("cpu", timeout_s)
    try:
        fn(group, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(fn: Callable[..., Any], world_size: int, *args: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Run fn(group, *args) in world_size fresh processes on this machine; raise if any rank raises."""
    mp.start_processes(
        _worker, args=(world_size, free_port(), fn, args, timeout_s),
        nprocs=world_size, join=True, start_method="spawn",
    )
