"""A rank's model: the chapter-0 decoder built with this rank's heads, loaded with only its slices.

The decoder code is unchanged. A rank builds it from `local_config` (its
heads and MLP slice), swaps in the three communicating layers of layers.py,
and reads each tensor's slice straight from the checkpoint (safetensors'
`get_slice`), so no rank ever holds a full copy of a sharded weight.

Checkpoints come in two layouts. Llama, Qwen2 and Qwen3 store q, k, v and
gate, up as separate tensors. Others (Phi-3, and many converted or fused
checkpoints) store one tensor per layer with the rows stacked:

    model.layers.{i}.self_attn.qkv_proj.{weight,bias}   rows [q; k; v]
    model.layers.{i}.mlp.gate_up_proj.{weight,bias}     rows [gate; up]

Our model keeps separate q/k/v and gate/up parameters whatever the layout.
"""

from __future__ import annotations

from pathlib import Path

import torch

from miniyaie.distributed.layers import ParallelLMHead, RowParallelLinear, VocabParallelEmbedding
from miniyaie.distributed.process_group import TPGroup
from miniyaie.distributed.sharding import local_config, weight_slice
from miniyaie.model import CausalLM, ModelConfig
from miniyaie.model.loader import ModelLoadError, read_config, weight_files

MERGED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


# ANCHOR: checkpoint
class Checkpoint:
    """The tensors of a safetensors checkpoint directory, read lazily: whole, or only a range of rows or columns.

    The directory holds model.safetensors or several files listed by
    model.safetensors.index.json (`weight_files` finds them); `keys()` is
    every tensor of every file. Nothing is read before `read` asks for it,
    and `read` with a range reads only that range from the file.
    """

    def __init__(self, path: Path):
        from safetensors import safe_open

        # Idea: a key may live in any of several files: how does read find it without opening them all again?
        # Stuck? `miniyaie hint 7.3` prints hints, one level at a time.
        # TODO(Task 7.3): Loading a rank's shard of a checkpoint. Replace this line with your code.
        raise NotImplementedError("Chapter 7, Task 3: Loading a rank's shard of a checkpoint — see book/src/ch07_tensor_parallel.md")

    def keys(self) -> list[str]:
        """Every tensor name of every file."""
        # Idea: the names are already known from the constructor.
        # Stuck? `miniyaie hint 7.3` prints hints, one level at a time.
        # TODO(Task 7.3): Loading a rank's shard of a checkpoint. Replace this line with your code.
        raise NotImplementedError("Chapter 7, Task 3: Loading a rank's shard of a checkpoint — see book/src/ch07_tensor_parallel.md")

    def shape(self, key: str) -> tuple[int, ...]:
        """Tensor `key`'s shape, without reading the tensor."""
        # Idea: a shape is in the file's header: which handle call gives it without reading data?
        # Stuck? `miniyaie hint 7.3` prints hints, one level at a time.
        # TODO(Task 7.3): Loading a rank's shard of a checkpoint. Replace this line with your code.
        raise NotImplementedError("Chapter 7, Task 3: Loading a rank's shard of a checkpoint — see book/src/ch07_tensor_parallel.md")

    def read(self, key: str, dim: int | None = None, start: int = 0, end: int | None = None) -> torch.Tensor:
        """Tensor `key`, or only its indices [start, end) along `dim` (0 or 1), reading no more than that."""
        # Idea: which handle call reads a range, and which reads everything?
        # Stuck? `miniyaie hint 7.3` prints hints, one level at a time.
        # TODO(Task 7.3): Loading a rank's shard of a checkpoint. Replace this line with your code.
        raise NotImplementedError("Chapter 7, Task 3: Loading a rank's shard of a checkpoint — see book/src/ch07_tensor_parallel.md")
# ANCHOR_END: checkpoint


# ANCHOR: build_rank_model
def build_rank_model(config: ModelConfig, group: TPGroup) -> CausalLM:
    """This rank's decoder, with uninitialised weights of the shapes of its slices, on the CPU.

    Built from `local_config(config, group.rank, group.world_size)` with
    chapter 0's CausalLM; in every layer o_proj and down_proj become
    RowParallelLinear, the embedding a VocabParallelEmbedding and the head a
    ParallelLMHead (sharing the embedding's weight when the config ties
    them). Parameter names are the unsplit model's.
    """
    # Idea: which modules of the local model compute a part of an answer that needs the other ranks?
    # Stuck? `miniyaie hint 7.3` prints hints, one level at a time.
    # TODO(Task 7.3): Loading a rank's shard of a checkpoint. Replace this line with your code.
    raise NotImplementedError("Chapter 7, Task 3: Loading a rank's shard of a checkpoint — see book/src/ch07_tensor_parallel.md")
# ANCHOR_END: build_rank_model


# ANCHOR: rank_state_dict
def rank_state_dict(checkpoint, config: ModelConfig, rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Rank's parameters, by their names in the unsplit model, read from `checkpoint`.

    `checkpoint` has `keys()`, `shape(key)` and `read(key, dim=None, start=0,
    end=None)` (see Checkpoint). Each value equals the rank's part
    (`weight_slice`) of the unsplit tensor of that name; whether the
    checkpoint stores q/k/v and gate/up separately or merged (the module's
    docstring), the result has the separate names, never the merged ones.
    Keys that are no parameter of the model (rotary `inv_freq` buffers, the
    lm_head of a model whose config ties it to the embedding) are left out.
    Only the rank's part of a split tensor is read. A merged tensor whose
    rows are not what the config's heads and features make raises
    ModelLoadError naming the key, its rows and the rows expected.
    """
    # Idea: where, inside a merged tensor, does this rank's q (or k, or v) begin?
    # Stuck? `miniyaie hint 7.3` prints hints, one level at a time.
    # TODO(Task 7.3): Loading a rank's shard of a checkpoint. Replace this line with your code.
    raise NotImplementedError("Chapter 7, Task 3: Loading a rank's shard of a checkpoint — see book/src/ch07_tensor_parallel.md")
# ANCHOR_END: rank_state_dict


# ANCHOR: shard_model
def shard_model(checkpoint, config: ModelConfig, group: TPGroup, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu") -> CausalLM:
    """Rank `group.rank`'s model (`build_rank_model`) with its weights from `checkpoint`, in eval mode.

    Every parameter is filled from `rank_state_dict`, on `device` in `dtype`.
    Raises ModelLoadError naming the key when the checkpoint has a tensor
    that is no parameter of the model, a slice whose shape is not the
    parameter's, or lacks a parameter (named too).
    """
    # Idea: what must be true of the state dict and the model before a single value is trusted?
    # Stuck? `miniyaie hint 7.3` prints hints, one level at a time.
    # TODO(Task 7.3): Loading a rank's shard of a checkpoint. Replace this line with your code.
    raise NotImplementedError("Chapter 7, Task 3: Loading a rank's shard of a checkpoint — see book/src/ch07_tensor_parallel.md")
# ANCHOR_END: shard_model


def load_rank_model(path: Path, group: TPGroup, dtype: torch.dtype = torch.float32,
                    device: str | torch.device = "cpu") -> CausalLM:
    """Rank `group.rank`'s model from the checkpoint directory at `path`, reading only its slices."""
    # Idea: the pieces are all written: which reader and which config?
    # Stuck? `miniyaie hint 7.3` prints hints, one level at a time.
    # TODO(Task 7.3): Loading a rank's shard of a checkpoint. Replace this line with your code.
    raise NotImplementedError("Chapter 7, Task 3: Loading a rank's shard of a checkpoint — see book/src/ch07_tensor_parallel.md")
