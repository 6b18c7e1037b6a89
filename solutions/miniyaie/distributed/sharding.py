"""Which slice of each weight a rank owns, and which tensor-parallel sizes a model allows."""

from __future__ import annotations


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
