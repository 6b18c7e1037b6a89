"""A model straight from a GGUF file, in its own blocks: no float32 copy of the weights is ever made.

Chapter 0's loader converts the bundled GGUF once into a float32 Hugging Face directory (540 MB on disk and
in memory) and the gguf scheme would then swap those weights for the file's blocks. This path builds the
model on the `meta` device (shapes, no storage), lets Task 10.4's loader put the file's blocks in, and
reads only the tensors the file stores as floats (the norms). The config and the tokenizer come from a
small directory written once from the file's metadata (a few seconds; the weights are not touched).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import torch
from torch import nn

from miniyaie.model.loader import LoadedModel, cache_dir, eos_token_ids, load_tokenizer, read_config
from miniyaie.model.transformer import CausalLM
from miniyaie.quant.gguf_loader import PROJECTIONS, ROTARY_INTERLEAVED, load_gguf_blocks, read_gguf
from miniyaie.quant.linear import merge_blocks

# the model's float tensors of layer i and their names in blk.{i} (projections' biases included)
LAYER_FLOATS = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
                "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
                **{f"{name}.{kind}": f"{short}.{kind}" for short, name in PROJECTIONS.items() for kind in ("weight", "bias")}}
TOP_FLOATS = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight"}


def header_dir(gguf: Path) -> Path:
    """config.json, generation_config.json and the tokenizer of `gguf`, written once under the cache dir."""
    out_dir = cache_dir() / f"{gguf.stem}-{gguf.stat().st_size}-header"
    if (out_dir / "config.json").is_file():
        return out_dir
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    print(f"Reading {gguf.name}'s config and tokenizer once into {out_dir} ...", flush=True)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the blocks are this loader's business, not transformers'
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    staging = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    config.save_pretrained(staging)
    GenerationConfig.from_model_config(config).save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(out_dir)
    except OSError:  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def _gguf_name(name: str) -> str | None:
    """The GGUF name of a model tensor (`model.layers.3.input_layernorm.weight` -> `blk.3.attn_norm.weight`)."""
    if name in TOP_FLOATS:
        return TOP_FLOATS[name]
    parts = name.split(".", 3)
    if parts[:2] == ["model", "layers"] and parts[3] in LAYER_FLOATS:
        return f"blk.{parts[2]}.{LAYER_FLOATS[parts[3]]}"
    return None


def _float_tensor(name: str, gguf_name: str | None, tensors: dict, architecture: str, config) -> torch.Tensor:
    if gguf_name not in tensors:
        raise ValueError(f"the GGUF file has no float tensor for {name} (looked for {gguf_name})")
    kind, data, shape = tensors[gguf_name]
    if kind not in ("F32", "F16"):
        raise ValueError(f"tensor {gguf_name} is {kind}, which has no kernel here")
    values = torch.from_numpy(np.asarray(data, dtype=np.float32).copy()).reshape(shape)
    heads = {"attn_q": config.num_heads, "attn_k": config.num_kv_heads}.get(gguf_name.split(".")[-2])
    if heads and architecture in ROTARY_INTERLEAVED:  # stored rows 2i, 2i+1 are the model's i, i + head_dim/2
        rows = values.shape[0]
        values = values.reshape(heads, rows // heads // 2, 2, -1).transpose(1, 2).reshape(values.shape)
    return values


# ANCHOR: load_gguf_model
def load_gguf_model(gguf: str | Path, dtype: torch.dtype = torch.float32) -> LoadedModel:
    """The model of `gguf` on the CPU: projections (and embedding, head) in the file's blocks, norms in `dtype`.
    ValueError (one line) for a tensor the file lacks or stores in a type without a kernel here."""
    gguf = Path(gguf)
    header = header_dir(gguf)
    config = read_config(header)
    with torch.device("meta"):
        model = CausalLM(config)
    load_gguf_blocks(model, gguf)  # Task 10.4: every block tensor replaces its layer
    architecture, tensors = read_gguf(gguf)
    for module_name, module in model.named_modules():  # what is left on `meta`: the file's float tensors
        for key, tensor in module._parameters.items():
            name = f"{module_name}.{key}"
            if tensor is None or not tensor.is_meta or (name == "lm_head.weight" and config.tie_word_embeddings):
                continue  # a tied head shares the embedding (below)
            values = _float_tensor(name, _gguf_name(name), tensors, architecture, config).to(dtype)
            module._parameters[key] = nn.Parameter(values, requires_grad=False)
    if config.tie_word_embeddings and isinstance(model.lm_head, nn.Linear):
        model.lm_head.weight = model.model.embed_tokens.weight
    merge_blocks(model)
    tokenizer = load_tokenizer(header)
    return LoadedModel(model.eval(), tokenizer, eos_token_ids(header, tokenizer), gguf)
# ANCHOR_END: load_gguf_model
