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
    # Idea: for each layer of the model, which tensor of the file, in what row order, and what replaces it?
    # Stuck? `miniyaie hint 10.4` prints hints, one level at a time.
    # TODO(Task 10.4): Reading a GGUF file's blocks. Replace this line with your code.
    raise NotImplementedError("Chapter 10, Task 4: Reading a GGUF file's blocks — see book/src/ch10_quantization.md")
# ANCHOR_END: load_gguf_blocks
