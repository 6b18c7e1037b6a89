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

        # Nudge: a key may live in any of several files: how does read find it without opening them all again?
        # Hint 1: safe_open gives a handle per file that reads one tensor, or a slice of one
        #   (get_slice: a view that reads only what you index), on demand. Open each file once
        #   and remember which handle holds which key.
        # Hint 2: Open every file of weight_files(path); build a dict key -> handle over all their
        #   keys. shape is the slice view's get_shape(); read is get_tensor for the whole tensor,
        #   else index the slice view: [start:end] on dim 0, [:, start:end] on dim 1.
        # Hint 3:
        #   handles = [safe_open(str(f), framework="pt") for f in weight_files(path)]
        #   where = {key: h for h in handles for key in h.keys()}
        #   read: view = where[key].get_slice(key); view[start:end] or view[:, start:end]
        # BEGIN SOLUTION 7.3: Loading a rank's shard of a checkpoint
        self._handles = [safe_open(str(file), framework="pt") for file in weight_files(Path(path))]
        self._where = {key: handle for handle in self._handles for key in handle.keys()}
        # END SOLUTION

    def keys(self) -> list[str]:
        """Every tensor name of every file."""
        # Nudge: the names are already known from the constructor.
        # Hint 1: Every key of every file, each once: the constructor's map has them all.
        # Hint 2: Return the keys of the key -> handle map as a list.
        # Hint 3:
        #   return list(where)
        # BEGIN SOLUTION 7.3: Loading a rank's shard of a checkpoint
        return list(self._where)
        # END SOLUTION

    def shape(self, key: str) -> tuple[int, ...]:
        """Tensor `key`'s shape, without reading the tensor."""
        # Nudge: a shape is in the file's header: which handle call gives it without reading data?
        # Hint 1: A slice view reads nothing until it is indexed, and it knows its shape.
        # Hint 2: Take the key's handle, get_slice(key), and its get_shape(), as a tuple.
        # Hint 3:
        #   return tuple(where[key].get_slice(key).get_shape())
        # BEGIN SOLUTION 7.3: Loading a rank's shard of a checkpoint
        return tuple(self._where[key].get_slice(key).get_shape())
        # END SOLUTION

    def read(self, key: str, dim: int | None = None, start: int = 0, end: int | None = None) -> torch.Tensor:
        """Tensor `key`, or only its indices [start, end) along `dim` (0 or 1), reading no more than that."""
        # Nudge: which handle call reads a range, and which reads everything?
        # Hint 1: get_tensor reads the whole tensor; indexing a get_slice view reads only what
        #   the index selects. dim None means the whole tensor.
        # Hint 2: dim None: get_tensor. Otherwise take the slice view and index [start:end] for
        #   rows (dim 0) or [:, start:end] for columns (dim 1).
        # Hint 3:
        #   if dim is None: return handle.get_tensor(key)
        #   view = handle.get_slice(key); return view[start:end] if dim == 0 else view[:, start:end]
        # BEGIN SOLUTION 7.3: Loading a rank's shard of a checkpoint
        if dim is None:
            return self._where[key].get_tensor(key)
        view = self._where[key].get_slice(key)
        return view[start:end] if dim == 0 else view[:, start:end]
        # END SOLUTION
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
    # Nudge: which modules of the local model compute a part of an answer that needs the other ranks?
    # Hint 1: A model built from the local config already has the right column-parallel layers:
    #   q/k/v and gate/up with this rank's rows. What it gets wrong are the layers whose input
    #   or output spans all ranks: o_proj and down_proj (the local config makes them read only
    #   this rank's features but they must sum over ranks), and the embedding and head (the
    #   local config keeps the whole vocabulary). Build on the meta device, then allocate, so
    #   no full-size weight is ever made.
    # Hint 2: local = local_config(...); build CausalLM(local) under torch.device("meta") and
    #   to_empty(device="cpu"); for each layer, replace self_attn.o_proj with
    #   RowParallelLinear(local heads * head_dim, hidden, local.o_bias, group) and mlp.down_proj
    #   with RowParallelLinear(local.intermediate_size, hidden, local.mlp_bias, group); replace
    #   model.embed_tokens and lm_head with the vocab-parallel layers of the full vocabulary;
    #   tie lm_head.weight to the embedding's weight if the config says so.
    # Hint 3:
    #   local = local_config(config, rank, N)
    #   with torch.device("meta"): model = CausalLM(local)
    #   model = model.to_empty(device="cpu")
    #   for layer in model.model.layers: layer.self_attn.o_proj = RowParallelLinear(...); layer.mlp.down_proj = ...
    #   model.model.embed_tokens = VocabParallelEmbedding(V, hidden, group); model.lm_head = ParallelLMHead(...)
    #   if tied: model.lm_head.weight = model.model.embed_tokens.weight
    # BEGIN SOLUTION 7.3: Loading a rank's shard of a checkpoint
    local = local_config(config, group.rank, group.world_size)
    with torch.device("meta"):
        model = CausalLM(local)
    model = model.to_empty(device="cpu")
    for layer in model.model.layers:
        attention, mlp = layer.self_attn, layer.mlp
        attention.o_proj = RowParallelLinear(local.num_heads * local.head_dim, config.hidden_size, local.o_bias, group)
        mlp.down_proj = RowParallelLinear(local.intermediate_size, config.hidden_size, local.mlp_bias, group)
    model.model.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, group)
    model.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, group)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model
    # END SOLUTION
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
    # Nudge: where, inside a merged tensor, does this rank's q (or k, or v) begin?
    # Hint 1: A merged tensor is the separate tensors stacked by rows: [q; k; v] has H*d rows of
    #   q, then K*d of k, then K*d of v (d = head_dim); [gate; up] has I rows of each. The
    #   rank's part of each piece is that piece's weight_slice, shifted by where the piece
    #   starts: three (or two) ranges, not one, since the rank's q, k and v rows are not next
    #   to each other. Check the merged rows against the sum of the pieces before you slice:
    #   a tensor of another size would be cut silently at the wrong places.
    # Hint 2: For every key: skip inv_freq buffers and a tied lm_head. Split the key into
    #   prefix, layer and "weight"/"bias". If the layer is not merged, read weight_slice(key)
    #   (the whole tensor when it is None). If it is (MERGED names the pieces), compute each
    #   piece's full rows (q: H*d, k and v: K*d, gate and up: I), compare their sum with
    #   checkpoint.shape(key)[0], then for each piece read rows offset + start .. offset + end
    #   of the merged key under the piece's own name, and move offset on by the piece's rows.
    # Hint 3:
    #   for key in checkpoint.keys():
    #       if key ends with "rotary_emb.inv_freq" or (tied and key == "lm_head.weight"): continue
    #       *prefix, layer, kind = key.split(".")
    #       if layer not in MERGED: state[key] = checkpoint.read(key, *(weight_slice(key, ...) or ())); continue
    #       sizes = [H*d, K*d, K*d] if layer == "qkv_proj" else [I, I]
    #       if checkpoint.shape(key)[0] != sum(sizes): raise ModelLoadError(f"{key}: ... rows, expected ...")
    #       offset = 0
    #       for piece, size in zip(MERGED[layer], sizes):
    #           name = prefix + piece + kind, dot-joined; _, start, end = weight_slice(name, ...)
    #           state[name] = checkpoint.read(key, 0, offset + start, offset + end); offset += size
    # BEGIN SOLUTION 7.3: Loading a rank's shard of a checkpoint
    state: dict[str, torch.Tensor] = {}
    for key in checkpoint.keys():
        if key.endswith("rotary_emb.inv_freq") or (config.tie_word_embeddings and key == "lm_head.weight"):
            continue
        *prefix, layer, kind = key.split(".")
        if layer not in MERGED:
            state[key] = checkpoint.read(key, *(weight_slice(key, config, rank, world_size) or ()))
            continue
        q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
        sizes = [q, kv, kv] if layer == "qkv_proj" else [config.intermediate_size] * 2
        rows = checkpoint.shape(key)[0]
        if rows != sum(sizes):
            raise ModelLoadError(f"{key} has {rows} rows; the config's heads and features make {sum(sizes)}")
        offset = 0
        for piece, size in zip(MERGED[layer], sizes):
            name = ".".join([*prefix, piece, kind])
            _, start, end = weight_slice(name, config, rank, world_size)
            state[name] = checkpoint.read(key, 0, offset + start, offset + end)
            offset += size
    return state
    # END SOLUTION
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
    # Nudge: what must be true of the state dict and the model before a single value is trusted?
    # Hint 1: The two sides must match exactly: every key of the state dict a parameter, every
    #   parameter a key, and each shape the parameter's. A tied head appears once in
    #   named_parameters (as the embedding), so it needs no key of its own.
    # Hint 2: Build the model; take dict(model.named_parameters()) and the rank's state dict;
    #   for each key, refuse a key with no parameter or a shape that differs, else copy the
    #   tensor into the parameter's data; then refuse any parameter no key filled; move the
    #   model to device and dtype, eval().
    # Hint 3:
    #   model = build_rank_model(config, group); params = dict(model.named_parameters())
    #   for key, tensor in rank_state_dict(...).items(): check key and shape; params[key].data.copy_(tensor)
    #   missing = sorted(set(params) - set(state)); if missing: raise ModelLoadError(...)
    #   return model.to(device=device, dtype=dtype).eval()
    # BEGIN SOLUTION 7.3: Loading a rank's shard of a checkpoint
    model = build_rank_model(config, group)
    params = dict(model.named_parameters())
    state = rank_state_dict(checkpoint, config, group.rank, group.world_size)
    for key, tensor in state.items():
        if key not in params:
            raise ModelLoadError(f"the checkpoint's {key} is no parameter of the model")
        if tensor.shape != params[key].shape:
            raise ModelLoadError(f"rank {group.rank}'s slice of {key} is {tuple(tensor.shape)}, "
                                 f"the model expects {tuple(params[key].shape)}")
        params[key].data.copy_(tensor)
    missing = sorted(set(params) - set(state))
    if missing:
        raise ModelLoadError(f"the checkpoint does not match the model (missing {missing[:3]})")
    return model.to(device=device, dtype=dtype).eval()
    # END SOLUTION
# ANCHOR_END: shard_model


def load_rank_model(path: Path, group: TPGroup, dtype: torch.dtype = torch.float32,
                    device: str | torch.device = "cpu") -> CausalLM:
    """Rank `group.rank`'s model from the checkpoint directory at `path`, reading only its slices."""
    # Nudge: the pieces are all written: which reader and which config?
    # Hint 1: The directory's config.json gives the unsplit config; its safetensors files the tensors.
    # Hint 2: shard_model over a Checkpoint of the directory and read_config of it.
    # Hint 3:
    #   return shard_model(Checkpoint(path), read_config(path), group, dtype, device)
    # BEGIN SOLUTION 7.3: Loading a rank's shard of a checkpoint
    return shard_model(Checkpoint(path), read_config(Path(path)), group, dtype, device)
    # END SOLUTION
