"""Which slice of each weight a rank owns, and which tensor-parallel sizes a model allows."""

from __future__ import annotations

import torch


class TensorParallelSizeError(ValueError):
    """A tensor-parallel size the model's heads cannot be split into."""


def check_tensor_parallel_size(num_heads: int, num_kv_heads: int, tp_size: int) -> None:
    """Refuse, in one line, a size that does not split the heads evenly.

    Query heads must divide evenly; KV heads either divide evenly or, when
    there are fewer KV heads than ranks, each KV head is replicated on
    tp_size / num_kv_heads ranks (so tp_size must be a multiple of them).
    """
    if tp_size < 1:
        raise TensorParallelSizeError(f"tensor-parallel size must be >= 1, got {tp_size}")
    if num_heads % tp_size:
        raise TensorParallelSizeError(
            f"tensor-parallel size {tp_size} does not divide the model's {num_heads} query heads")
    if num_kv_heads >= tp_size and num_kv_heads % tp_size:
        raise TensorParallelSizeError(
            f"tensor-parallel size {tp_size} does not divide the model's {num_kv_heads} KV heads")
    if num_kv_heads < tp_size and tp_size % num_kv_heads:
        raise TensorParallelSizeError(
            f"{num_kv_heads} KV heads cannot be replicated evenly over {tp_size} ranks")


def shard_range(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, end) of rank's even share of size rows (the last rank may get fewer when uneven)."""
    per_rank = -(-size // world_size)
    start = min(rank * per_rank, size)
    return start, min(start + per_rank, size)


def kv_head_range(num_kv_heads: int, rank: int, world_size: int) -> tuple[int, int]:
    """The KV heads rank holds: its even share, or the one head it replicates."""
    if num_kv_heads >= world_size:
        per_rank = num_kv_heads // world_size
        return rank * per_rank, (rank + 1) * per_rank
    head = rank * num_kv_heads // world_size
    return head, head + 1


def qkv_shard(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int, num_kv_heads: int,
              rank: int, world_size: int) -> torch.Tensor:
    """This rank's rows of the merged QKV weight: its query heads, then its K and V heads.

    Works for a weight [heads * head_dim, hidden] or a bias [heads * head_dim].
    """
    head_dim = q.shape[0] // num_heads
    q_per_rank = num_heads // world_size
    q_rows = q[rank * q_per_rank * head_dim:(rank + 1) * q_per_rank * head_dim]
    kv_start, kv_end = kv_head_range(num_kv_heads, rank, world_size)
    kv_rows = slice(kv_start * head_dim, kv_end * head_dim)
    return torch.cat([q_rows, k[kv_rows], v[kv_rows]], dim=0)


def gate_up_shard(gate: torch.Tensor, up: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's rows of the merged gate/up weight: its slice of gate, then the same slice of up."""
    start, end = shard_range(gate.shape[0], rank, world_size)
    return torch.cat([gate[start:end], up[start:end]], dim=0)
