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
    {num_kv_heads} KV heads nor is a multiple of them". A size that is no whole number >= 1 (a bool
    included) raises "tensor-parallel size must be a whole number >= 1, got
    {tp_size!r}". Return None when the size is fine.
    """
    # Nudge: every rank must get the same number of query heads, and whole KV heads (or whole copies of one).
    # Hint 1: Rank r runs query heads [r*H/N, (r+1)*H/N): only whole numbers work, so N must
    #   divide H. A KV head cannot be cut in half either: with K >= N each rank takes K/N of
    #   them; with K < N, N/K ranks share (replicate) each one. Check the query heads first:
    #   SmolLM2 (9 query, 3 KV heads) at N = 2 must name its query heads.
    # Hint 2: First refuse an N that is not an int >= 1 (a bool is an int in Python: refuse it
    #   by name). If H % N: raise the query-heads error. Then, if K % N and N % K are both
    #   non-zero, raise the KV-heads error. The messages are in the docstring.
    # Hint 3:
    #   if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1: raise ...
    #   if num_heads % tp_size: raise TensorParallelSizeError(f"... {num_heads} query heads")
    #   if num_kv_heads % tp_size and tp_size % num_kv_heads: raise TensorParallelSizeError(f"... KV heads ...")
    # BEGIN SOLUTION 7.1: Which slice of each weight a rank owns
    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1:
        raise TensorParallelSizeError(f"tensor-parallel size must be a whole number >= 1, got {tp_size!r}")
    if num_heads % tp_size:
        raise TensorParallelSizeError(
            f"tensor-parallel size {tp_size} does not divide the model's {num_heads} query heads")
    if num_kv_heads % tp_size and tp_size % num_kv_heads:
        raise TensorParallelSizeError(
            f"tensor-parallel size {tp_size} neither divides the model's {num_kv_heads} KV heads "
            f"nor is a multiple of them")
    # END SOLUTION
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
    # Nudge: where does a rank start when the ranks before it have used up every row?
    # Hint 1: With a fixed width per rank (ceil), rank r would start at r * width; near the end
    #   that start, and its end, can pass `size`. Both are clamped to size, so a late rank gets
    #   a short or empty range that still begins where the previous one ended.
    # Hint 2: width = ceil(size / world_size); start = min(rank * width, size);
    #   end = min(start + width, size).
    # Hint 3:
    #   per_rank = -(-size // world_size)
    #   start = min(rank * per_rank, size)
    #   return start, min(start + per_rank, size)
    # BEGIN SOLUTION 7.1: Which slice of each weight a rank owns
    per_rank = -(-size // world_size)
    start = min(rank * per_rank, size)
    return start, min(start + per_rank, size)
    # END SOLUTION
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
    # Nudge: find the rank's query heads first; the KV heads follow from which head each of them reads.
    # Hint 1: Rank r owns query heads [r*H/N, (r+1)*H/N), H/N of them in a row. Consecutive
    #   query heads read consecutive KV heads, group = H/K of them per KV head, so the KV heads
    #   needed form a range too: from the head its first query head reads to the head its
    #   last query head reads, inclusive. The same formula covers K >= N and K < N.
    # Hint 2: q_start = r*H//N and q_end = (r+1)*H//N; group = H//K; the answer is
    #   (q_start // group, (q_end - 1) // group + 1).
    # Hint 3:
    #   q_start, q_end = rank * H // N, (rank + 1) * H // N
    #   group = H // K
    #   return q_start // group, (q_end - 1) // group + 1
    # BEGIN SOLUTION 7.1: Which slice of each weight a rank owns
    q_start, q_end = rank * num_heads // world_size, (rank + 1) * num_heads // world_size
    group = num_heads // num_kv_heads  # query heads per KV head
    return q_start // group, (q_end - 1) // group + 1
    # END SOLUTION
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
    # Nudge: which of the three counts can differ from rank to rank, and which can exceed an even share?
    # Hint 1: The query heads split evenly (the size check guarantees it). The KV heads do not
    #   always: with fewer KV heads than ranks a rank holds one replicated head, not
    #   num_kv_heads / world_size of one (that would be 0). The MLP features are split by
    #   shard_range, so when world_size does not divide them the last ranks hold fewer.
    # Hint 2: Check the size first. Then num_heads // world_size query heads; the length of
    #   kv_head_range(...) KV heads; the length of shard_range(intermediate_size, ...) features.
    #   dataclasses.replace makes the new config.
    # Hint 3:
    #   check_tensor_parallel_size(H, K, N)
    #   kv_start, kv_end = kv_head_range(H, K, rank, N)
    #   mlp_start, mlp_end = shard_range(I, rank, N)
    #   return replace(config, num_heads=H // N, num_kv_heads=kv_end - kv_start, intermediate_size=mlp_end - mlp_start)
    # BEGIN SOLUTION 7.3: Loading a rank's shard of a checkpoint
    check_tensor_parallel_size(config.num_heads, config.num_kv_heads, world_size)
    kv_start, kv_end = kv_head_range(config.num_heads, config.num_kv_heads, rank, world_size)
    mlp_start, mlp_end = shard_range(config.intermediate_size, rank, world_size)
    return replace(config, num_heads=config.num_heads // world_size, num_kv_heads=kv_end - kv_start,
                   intermediate_size=mlp_end - mlp_start)
    # END SOLUTION
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
    # Nudge: decide per layer kind which dimension is split, then turn the rank's heads or features into a range.
    # Hint 1: Three kinds of range. Query heads: rank r owns heads [r*H/N, (r+1)*H/N). KV heads:
    #   `kv_head_range`. Features of the MLP and rows of the vocabulary: `shard_range`. A head
    #   range becomes a row range by multiplying by head_dim. Column-parallel layers split their
    #   output (dim 0), row-parallel layers their input (dim 1); norms and the row-parallel
    #   biases are added after the all-reduce, so every rank keeps them whole.
    # Hint 2: Look at the last two parts of the name: the layer ("q_proj", "down_proj", ...) and
    #   "weight"/"bias". q_proj -> query-head rows (dim 0); k_proj, v_proj -> KV-head rows;
    #   o_proj weight -> query-head columns (dim 1); gate_proj, up_proj -> shard_range of
    #   intermediate_size on dim 0; down_proj weight -> the same range on dim 1; embed_tokens and
    #   lm_head -> shard_range of vocab_size on dim 0; o_proj/down_proj bias and norms -> None.
    # Hint 3:
    #   layer, kind = the last two dot-separated parts of name
    #   q = (r*H//N*head_dim, (r+1)*H//N*head_dim); kv = kv_head_range(...) times head_dim
    #   mlp = shard_range(intermediate_size, r, N); vocab = shard_range(vocab_size, r, N)
    #   q_proj -> (0, *q); k/v_proj -> (0, *kv); gate/up_proj -> (0, *mlp)
    #   o_proj weight -> (1, *q); down_proj weight -> (1, *mlp); embed_tokens/lm_head -> (0, *vocab)
    #   otherwise None
    # BEGIN SOLUTION 7.1: Which slice of each weight a rank owns
    layer, kind = name.split(".")[-2:]
    d, heads = config.head_dim, config.num_heads
    if layer == "q_proj" or (layer == "o_proj" and kind == "weight"):
        rows = (rank * heads // world_size * d, (rank + 1) * heads // world_size * d)
        return (0 if layer == "q_proj" else 1, *rows)
    if layer in ("k_proj", "v_proj"):
        start, end = kv_head_range(heads, config.num_kv_heads, rank, world_size)
        return 0, start * d, end * d
    if layer in ("gate_proj", "up_proj") or (layer == "down_proj" and kind == "weight"):
        return (0 if layer != "down_proj" else 1, *shard_range(config.intermediate_size, rank, world_size))
    if layer in ("embed_tokens", "lm_head"):
        return 0, *shard_range(config.vocab_size, rank, world_size)
    return None
    # END SOLUTION
# ANCHOR_END: weight_slice
