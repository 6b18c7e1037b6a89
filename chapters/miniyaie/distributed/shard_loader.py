"""A rank's model: the chapter-0 decoder built with this rank's heads, loaded with only its slices.

The decoder code is unchanged. A rank builds it from `local_config` (its
heads and MLP slice), swaps in the three communicating layers of layers.py,
and reads each tensor's slice straight from the safetensors files
(`get_slice`), so no rank ever holds a full copy of a sharded weight.
"""

from __future__ import annotations

from pathlib import Path

import torch

from miniyaie.distributed.layers import ParallelLMHead, RowParallelLinear, VocabParallelEmbedding
from miniyaie.distributed.process_group import TPGroup
from miniyaie.distributed.sharding import local_config, weight_slice
from miniyaie.model import CausalLM, ModelConfig
from miniyaie.model.loader import ModelLoadError, read_config, weight_files


# ANCHOR: build_rank_model
def build_rank_model(config: ModelConfig, group: TPGroup) -> CausalLM:
    """This rank's decoder with uninitialised (empty) weights of the right shapes."""
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
# ANCHOR_END: build_rank_model


def _read_slice(handle, key: str, part: tuple[int, int, int] | None) -> torch.Tensor:
    if part is None:
        return handle.get_tensor(key)
    dim, start, end = part
    view = handle.get_slice(key)
    return view[start:end] if dim == 0 else view[:, start:end]


def load_rank_model(path: Path, group: TPGroup, dtype: torch.dtype = torch.float32,
                    device: str | torch.device = "cpu") -> CausalLM:
    """Rank `group.rank`'s model from the checkpoint at `path`, reading only its slices."""
    from safetensors import safe_open

    config = read_config(path)
    model = build_rank_model(config, group)
    params = dict(model.named_parameters())  # a tied lm_head appears once, as the embedding
    loaded: set[str] = set()
    for file in weight_files(path):
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                if key not in params:
                    continue  # rotary buffers, a tied lm_head
                part = weight_slice(key, config, group.rank, group.world_size)
                tensor = _read_slice(handle, key, part)
                if tensor.shape != params[key].shape:
                    raise ModelLoadError(f"{path}: rank {group.rank}'s slice of {key} is {tuple(tensor.shape)}, "
                                         f"the model expects {tuple(params[key].shape)}")
                params[key].data.copy_(tensor)
                loaded.add(key)
    missing = sorted(set(params) - loaded)
    if missing:
        raise ModelLoadError(f"{path}: checkpoint does not match the model (missing {missing[:3]})")
    return model.to(device=device, dtype=dtype).eval()
