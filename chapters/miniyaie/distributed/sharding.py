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
    {num_kv_heads} KV heads nor is a multiple of them". A size that is no whole number >= 1 (a bool
    included) raises "tensor-parallel size must be a whole number >= 1, got
    {tp_size!r}". Return None when the size is fine.
    """
    # Idea: every rank must get the same number of query heads, and whole KV heads (or whole copies of one).
    # Stuck? `miniyaie hint 7.1` prints hints, one level at a time.
    # TODO(Task 7.1): Which slice of each weight a rank owns. Replace this line with your code.
    raise NotImplementedError('Chapter 7, Task 1: Which slice of each weight a rank owns — see book/src/ch07_tensor_parallel.md')
# ANCHOR_END: check_tensor_parallel_size


# ANCHOR: shard_range
def shard_range(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, end) of rank's share of `size` rows (MLP features, vocabulary ids).

    Every index in 0..size-1 belongs to exactly one rank, the ranks' ranges
    are in rank order (so an all-gather in rank order puts the pieces back),
    and each range is ceil(size / world_size) long except at the end: the
    last non-empty range may be shorter, and the ranks after it get empty
    ranges (size 4 over 3 ranks: (0, 2), (2, 4), (4, 4)).
    """
    # Idea: where does a rank start when the ranks before it have used up every row?
    # Stuck? `miniyaie hint 7.1` prints hints, one level at a time.
    # TODO(Task 7.1): Which slice of each weight a rank owns. Replace this line with your code.
    raise NotImplementedError('Chapter 7, Task 1: Which slice of each weight a rank owns — see book/src/ch07_tensor_parallel.md')
# ANCHOR_END: shard_range


# ANCHOR: kv_head_range
def kv_head_range(num_heads: int, num_kv_heads: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, end) of the KV heads rank's query heads read: the KV heads it must hold.

    Rank r runs the r-th of world_size equal runs of consecutive query heads.
    With grouped-query attention the query heads come in num_kv_heads equal
    groups of consecutive heads, group g reading KV head g. A KV head read by
    the query heads of several ranks is held by each of them (replicated).
    Examples the tests assert: 4 query / 1 KV head over 2 ranks: (0, 1) on
    both; 4 / 2 over 4 ranks: (0, 1), (0, 1), (1, 2), (1, 2).
    """
    # Idea: find the rank's query heads first; the KV heads follow from which head each of them reads.
    # Stuck? `miniyaie hint 7.1` prints hints, one level at a time.
    # TODO(Task 7.1): Which slice of each weight a rank owns. Replace this line with your code.
    raise NotImplementedError('Chapter 7, Task 1: Which slice of each weight a rank owns — see book/src/ch07_tensor_parallel.md')
# ANCHOR_END: kv_head_range


# ANCHOR: local_config
def local_config(config: ModelConfig, rank: int, world_size: int) -> ModelConfig:
    """The model one rank runs: `config` with this rank's num_heads, num_kv_heads and intermediate_size.

    Each is the number of heads or features of the rank's slices (as
    `weight_slice` gives them for q_proj, k_proj and up_proj); everything
    else (vocabulary, hidden size, layers, head_dim) is unchanged. A size
    that does not split the heads raises TensorParallelSizeError (the
    message of `check_tensor_parallel_size`), before anything is built.
    """
    # Idea: which of the three counts can differ from rank to rank, and which can exceed an even share?
    # Stuck? `miniyaie hint 7.3` prints hints, one level at a time.
    # TODO(Task 7.3): Loading a rank's shard of a checkpoint. Replace this line with your code.
    raise NotImplementedError("Chapter 7, Task 3: Loading a rank's shard of a checkpoint — see book/src/ch07_tensor_parallel.md")
# ANCHOR_END: local_config


# ANCHOR: weight_slice
def weight_slice(name: str, config: ModelConfig, rank: int, world_size: int) -> tuple[int, int, int] | None:
    """Which part of checkpoint tensor `name` rank holds: (dim, start, end), or None for all of it.

    `name` is a Hugging Face parameter name such as
    "model.layers.3.self_attn.k_proj.weight". Weights are [out_features,
    in_features] and biases [out_features]. The table in this module's
    docstring is the contract: a column-parallel layer keeps rows (dim 0) of
    its weight and bias, a row-parallel one keeps columns (dim 1) of its
    weight and its whole bias, the embedding and LM head keep the rank's
    rows of the vocabulary (`shard_range`), the MLP's features are split by
    `shard_range` too, and anything else is whole. Heads are never cut: a
    rank's q rows are all the rows of its query heads, its k and v rows
    those of the KV heads `kv_head_range` gives it.
    """
    # Idea: decide per layer kind which dimension is split, then turn the rank's heads or features into a range.
    # Stuck? `miniyaie hint 7.1` prints hints, one level at a time.
    # TODO(Task 7.1): Which slice of each weight a rank owns. Replace this line with your code.
    raise NotImplementedError('Chapter 7, Task 1: Which slice of each weight a rank owns — see book/src/ch07_tensor_parallel.md')
# ANCHOR_END: weight_slice
