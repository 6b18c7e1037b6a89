"""Chapter 7: tensor parallelism on torch.distributed (gloo on CPU, NCCL on GPUs)."""

from miniyaie.distributed.layers import ParallelLMHead, RowParallelLinear, VocabParallelEmbedding
from miniyaie.distributed.process_group import TPGroup, join, join_from_env, leave
from miniyaie.distributed.runtime import (
    ParallelModelRunner, TensorParallelError, TensorParallelRuntime, attach_engine, replay_steps, serve_as_worker,
)
from miniyaie.distributed.thread_group import CollectiveMismatchError, ThreadGroup, ThreadRanks
from miniyaie.distributed.shard_loader import build_rank_model, load_rank_model
from miniyaie.distributed.sharding import (
    TensorParallelSizeError, check_tensor_parallel_size, kv_head_range, local_config, shard_range, weight_slice,
)

__all__ = [
    "ParallelLMHead", "RowParallelLinear", "VocabParallelEmbedding",
    "TPGroup", "join", "join_from_env", "leave",
    "ParallelModelRunner", "TensorParallelError", "TensorParallelRuntime", "attach_engine", "replay_steps",
    "serve_as_worker", "CollectiveMismatchError", "ThreadGroup", "ThreadRanks",
    "build_rank_model", "load_rank_model",
    "TensorParallelSizeError", "check_tensor_parallel_size", "kv_head_range", "local_config", "shard_range",
    "weight_slice",
]
