"""Chapter 7: tensor parallelism on torch.distributed (gloo on CPU, NCCL on GPUs)."""

from miniyaie.distributed.process_group import TPGroup, init_from_env, spawn
from miniyaie.distributed.sharding import check_tensor_parallel_size, shard_range
from miniyaie.distributed.layers import (
    ColumnParallelLinear,
    ParallelLMHead,
    RowParallelLinear,
    VocabParallelEmbedding,
)

__all__ = [
    "TPGroup", "init_from_env", "spawn", "check_tensor_parallel_size", "shard_range",
    "ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding", "ParallelLMHead",
]
