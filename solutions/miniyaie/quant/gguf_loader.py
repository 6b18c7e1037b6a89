"""A GGUF file's weights as they are: its Q4_1 and Q8_0 blocks put in the model's layers (Task 10.4).

transformers reads a GGUF file by dequantizing every tensor to float32 (and undoing llama.cpp's reordering
of the q and k rows): the float32 model it gives is the oracle. This loader keeps the file's blocks instead,
so the two paths hold the same weights and differ only in the order of a dot product's additions.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import nn

from miniyaie.backends.gguf_file import read_tensors
from miniyaie.quant.blocks import QuantizedWeight, from_gguf_blocks
from miniyaie.quant.linear import QuantizedEmbedding, QuantizedLinear, float_linear

# the model's projections of layer i and the names llama.cpp gives them in blk.{i}
PROJECTIONS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj"}


# llama.cpp's converter reorders the q and k rows of these architectures only (see load_gguf_blocks)
ROTARY_INTERLEAVED = ("llama",)


def read_gguf(path: str | Path) -> tuple[str, dict[str, tuple[str, "object", tuple[int, ...]]]]:
    """The file's architecture (`general.architecture`, e.g. "llama" or "qwen2") and every tensor:
    name -> (type name such as "Q4_1" or "F32", raw data as stored, shape [rows, cols]). The same file read
    again (same size and time) is not read again."""
    stat = Path(path).stat()
    return _read_gguf(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _read_gguf(path: str, size: int, mtime_ns: int):
    return read_tensors(path)  # the tensor index only: the metadata (the vocabulary) is stepped over


# ANCHOR: load_gguf_blocks
def load_gguf_blocks(model: nn.Module, path: str | Path) -> int:
    """Put the GGUF file's Q4_1 / Q8_0 tensors into `model` (chapter 0's CausalLM, loaded from this file) as
    blocks, in place; returns how many tensors went in as blocks.

    The file names llama.cpp's tensors: layer i's projections are `blk.{i}.<name>.weight` with the names of
    PROJECTIONS, the embedding is `token_embd.weight` and the head `output.weight` (absent when the model
    ties its head to its embedding). Each tensor in a block type (GGUF_BLOCKS in blocks.py: read it with
    from_gguf_blocks) replaces its layer: a projection or the head by a QuantizedLinear (keeping the
    layer's bias; float_linear gives the nn.Linear inside a layer), the embedding by a QuantizedEmbedding;
    a tied head reads the embedding's blocks (one copy, counted once). A tensor stored as F32, F16 or BF16
    leaves its layer as it is (it already holds those weights). For the architectures in
    ROTARY_INTERLEAVED, llama.cpp's converter stores the rows of q and k in its own order within each
    head (its rotary layout, not the model's); the layers must get them in the model's order, the rows
    transformers' checkpoint of the model has and its float32 path loads from the file
    (model.config.num_heads and num_kv_heads count the heads; QuantizedWeight.rows reorders rows of
    blocks). Other architectures (qwen2, ...) are stored in the model's order. Afterwards every layer
    computes what the float32 model computed from the same file, up to the order of the additions.
    ValueError, naming the tensor: a tensor the model needs is missing, its shape differs from the
    layer's, or its type has no kernel here (Q4_K, Q6_K, ...).
    """
    # Nudge: for each layer of the model, which tensor of the file, in what row order, and what replaces it?
    # Hint 1: Drive the loop from the model, not the file: every projection of every layer, then the
    #   embedding, then the head, each looked up by its GGUF name (a name the model needs but the
    #   file lacks is an error; extra tensors such as norms are the float layers' business). A
    #   block type becomes a QuantizedWeight with from_gguf_blocks; the row order of q and k is a
    #   permutation of rows, and rows of blocks can be reordered without decoding them
    #   (QuantizedWeight.rows). q has config.num_heads heads, k config.num_kv_heads. Within a head
    #   the converter puts each rotary pair side by side: stored row 2 i is the model's row i, stored
    #   row 2 i + 1 the model's row i + head_dim / 2.
    # Hint 2: architecture, tensors = read_gguf(path). For layer i and each (short, name) in PROJECTIONS:
    #   kind, data, shape = tensors[f"blk.{i}.{short}.weight"]; check shape against the layer's
    #   weight; skip F32/F16; weight = from_gguf_blocks(kind, data, shape); for q and k of a
    #   ROTARY_INTERLEAVED architecture, reorder
    #   its rows with the index that takes model row r of head h from stored row h * hd + 2 r
    #   (r < hd / 2) or h * hd + 2 (r - hd / 2) + 1; replace the layer with QuantizedLinear(weight,
    #   bias). Then token_embd -> QuantizedEmbedding; output (or, tied, the embedding's weight)
    #   -> lm_head. Count the replacements.
    # Hint 3:
    #   architecture, tensors = read_gguf(path); count = 0
    #   def blocks(name, layer): check presence, shape == tuple(layer.weight.shape); None if F32/F16
    #   for i, layer in enumerate(model.model.layers):
    #       for short, name in PROJECTIONS.items():
    #           parent, child = getattr(layer, name.split(".")[0]), name.split(".")[1]
    #           linear = float_linear(getattr(parent, child)); w = blocks(f"blk.{i}.{short}.weight", linear)
    #           if short in ("attn_q", "attn_k") and architecture in ROTARY_INTERLEAVED:
    #               w = w.rows(order(w.shape[0], heads))
    #           setattr(parent, child, QuantizedLinear(w, linear.bias))
    #   order(rows, heads) = arange(rows).view(heads, hd / 2, 2).transpose(1, 2).reshape(rows)
    #   embedding, then output.weight if present else the embedding's blocks, for lm_head
    # BEGIN SOLUTION 10.4: Reading a GGUF file's blocks
    architecture, tensors = read_gguf(path)
    config = model.config

    def blocks(name: str, layer: nn.Module) -> QuantizedWeight | None:
        if name not in tensors:
            raise ValueError(f"the GGUF file has no tensor {name}")
        kind, data, shape = tensors[name]
        if shape != tuple(layer.weight.shape):
            raise ValueError(f"tensor {name} has shape {list(shape)}; the model's layer has {list(layer.weight.shape)}")
        if kind in ("F32", "F16", "BF16"):
            return None  # the float layer already holds these weights
        try:
            return from_gguf_blocks(kind, data, shape)
        except ValueError as exc:
            raise ValueError(f"tensor {name}: {exc}") from None

    def rotary_order(rows: int, heads: int) -> torch.Tensor:  # model row r of a head is stored row order[r]
        half = rows // heads // 2
        return torch.arange(rows).view(heads, half, 2).transpose(1, 2).reshape(rows)

    heads = {"attn_q": config.num_heads, "attn_k": config.num_kv_heads} if architecture in ROTARY_INTERLEAVED else {}
    count = 0
    for i, layer in enumerate(model.model.layers):
        for short, name in PROJECTIONS.items():
            parent_name, child = name.split(".")
            parent = getattr(layer, parent_name)
            linear = float_linear(getattr(parent, child))
            weight = blocks(f"blk.{i}.{short}.weight", linear)
            if weight is None:
                continue
            if short in heads:
                weight = weight.rows(rotary_order(weight.shape[0], heads[short]))
            setattr(parent, child, QuantizedLinear(weight, linear.bias))
            count += 1
    embedding = blocks("token_embd.weight", model.model.embed_tokens)
    if embedding is not None:
        model.model.embed_tokens, count = QuantizedEmbedding(embedding), count + 1
    head = embedding if "output.weight" not in tensors else blocks("output.weight", float_linear(model.lm_head))
    if head is not None:
        model.lm_head, count = QuantizedLinear(head), count + (head is not embedding)
    return count
    # END SOLUTION
# ANCHOR_END: load_gguf_blocks
