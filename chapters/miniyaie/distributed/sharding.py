"""Which slice of each weight a rank owns, and which tensor-parallel sizes a model allows.

Megatron-LM's split of a Llama block, for a rank r of N:

    q_proj, k_proj, v_proj   rows (output features): r's query heads / KV heads   column-parallel
    o_proj                   columns (input features): the same query heads        row-parallel
    gate_proj, up_proj       rows: r's slice of the intermediate features           column-parallel
    down_proj                columns: the same slice                                row-parallel
    embed_tokens, lm_head    rows: r's range of the vocabulary                      vocab-parallel
    norms, biases of o/down  whole (replicated)

A column-parallel output is exactly what the next row-parallel layer needs as
input, so a block communicates only after o_proj and after down_proj.
"""

from __future__ import annotations

from dataclasses import replace

from miniyaie.engine.errors import EngineError
from miniyaie.model import ModelConfig


class TensorParallelSizeError(EngineError, ValueError):
    """A tensor-parallel size the model's heads cannot be split into (refused before any rank starts)."""


# ANCHOR: check_tensor_parallel_size
def check_tensor_parallel_size(num_heads: int, num_kv_heads: int, tp_size: int) -> None:
    """Refuse, in one line, a size that does not split the heads evenly.

    Query heads must divide evenly: otherwise raise TensorParallelSizeError
    "tensor-parallel size {tp_size} does not divide the model's {num_heads}
    query heads". KV heads either divide evenly or, when there are fewer KV
    heads than ranks, each KV head is replicated on tp_size / num_kv_heads
    ranks, so tp_size must then be a multiple of them; otherwise raise
    "tensor-parallel size {tp_size} neither divides the model's
    {num_kv_heads} KV heads nor is a multiple of them". Return None when
    the size is fine.
    """
    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1:
        raise TensorParallelSizeError(f"tensor-parallel size must be a whole number >= 1, got {tp_size!r}")
    # Idea: every rank must get the same number of query heads, and whole KV heads (or whole copies of one).
    # Stuck? `miniyaie hint 7.1` prints hints, one level at a time.
    # TODO(Task 7.1): Which slice of each weight a rank owns. Replace this line with your code.
    raise NotImplementedError('Chapter 7, Task 1: Which slice of each weight a rank owns — see book/src/ch07_tensor_parallel.md')
# ANCHOR_END: check_tensor_parallel_size


def shard_range(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, end) of rank's share of `size` rows: ceil(size / world_size) each, the last rank the rest.

    Every index in 0..size-1 belongs to exactly one rank, and the ranks' ranges
    are in rank order (so an all-gather in rank order puts the pieces back).
    """
    per_rank = -(-size // world_size)
    start = min(rank * per_rank, size)
    return start, min(start + per_rank, size)


# ANCHOR: kv_head_range
def kv_head_range(num_heads: int, num_kv_heads: int, rank: int, world_size: int) -> tuple[int, int]:
    """The KV heads rank needs: those its query heads read.

    With grouped-query attention query head h reads KV head h // (num_heads //
    num_kv_heads). With at least as many KV heads as ranks each rank gets an
    even share; with fewer, a rank's query heads all read one KV head, which
    is then replicated on every rank that needs it.
    """
    # Idea: find the rank's query heads first; the KV heads follow from which head each of them reads.
    # Stuck? `miniyaie hint 7.1` prints hints, one level at a time.
    # TODO(Task 7.1): Which slice of each weight a rank owns. Replace this line with your code.
    raise NotImplementedError('Chapter 7, Task 1: Which slice of each weight a rank owns — see book/src/ch07_tensor_parallel.md')
# ANCHOR_END: kv_head_range


def local_config(config: ModelConfig, rank: int, world_size: int) -> ModelConfig:
    """The model one rank runs: its heads and its slice of the MLP; vocabulary and layers stay whole."""
    check_tensor_parallel_size(config.num_heads, config.num_kv_heads, world_size)
    kv_start, kv_end = kv_head_range(config.num_heads, config.num_kv_heads, rank, world_size)
    mlp_start, mlp_end = shard_range(config.intermediate_size, rank, world_size)
    return replace(config, num_heads=config.num_heads // world_size, num_kv_heads=kv_end - kv_start,
                   intermediate_size=mlp_end - mlp_start)


# ANCHOR: weight_slice
def weight_slice(name: str, config: ModelConfig, rank: int, world_size: int) -> tuple[int, int, int] | None:
    """Which part of checkpoint tensor `name` rank holds: (dim, start, end), or None for all of it.

    `name` is a Hugging Face parameter name such as
    "model.layers.3.self_attn.k_proj.weight". Weights are [out_features,
    in_features] and biases [out_features]. The table in this module's
    docstring is the contract: a column-parallel layer keeps rows (dim 0) of
    its weight and bias, a row-parallel one keeps columns (dim 1) of its
    weight and its whole bias, the embedding and LM head keep rows of the
    vocabulary (`shard_range`); anything else is whole. Heads are whole:
    q/k/v rows are head ranges times head_dim (`kv_head_range` for K and V).
    """
    # Idea: decide per layer kind which dimension is split, then turn the rank's heads or features into a range.
    # Stuck? `miniyaie hint 7.1` prints hints, one level at a time.
    # TODO(Task 7.1): Which slice of each weight a rank owns. Replace this line with your code.
    raise NotImplementedError('Chapter 7, Task 1: Which slice of each weight a rank owns — see book/src/ch07_tensor_parallel.md')
# ANCHOR_END: weight_slice
