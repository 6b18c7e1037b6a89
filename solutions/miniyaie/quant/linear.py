"""Linear layers and the embedding over weight blocks, and a model's linears swapped for them.

A decode step at a small batch reads every weight once: on a CPU its time is the bytes it reads. A
4-bit block of 32 weights with two float16s is 20 bytes where float32 weights take 128. The C++ kernel
(backends/cpu/quant_matmul.cpp) multiplies by the blocks as they are, dequantizing in registers; a step
with many rows decodes the weights once into float32 and multiplies with the float32 library, which wins
once the rows outnumber the cost of that decode. Without the kernel library, the weights are dequantized
for every call (the reference: slow, never wrong).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from miniyaie.backends.cpu.linear import MERGED, MergedLinears
from miniyaie.quant.blocks import QuantizedWeight, from_gguf_blocks, quantize_int4, quantize_int8

MANY_ROWS = 16  # above this many rows a step decodes the weights once and runs the float32 matmul
SCHEMES = ("none", "int8", "int4", "gguf")
PROJECTIONS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj"}


def _library():
    from miniyaie.backends.cpu.kernels import load

    return load()


class QuantizedLinear(nn.Module):
    """y = x @ W^T (+ bias) with W in blocks (a QuantizedWeight); float32 in, float32 out."""

    def __init__(self, weight: QuantizedWeight, bias: torch.Tensor | None = None):
        super().__init__()
        self.qweight, self.bias = weight, bias
        self.out_features, self.in_features = weight.shape
        # what code that asks a layer for its weight's dtype and device reads (an empty tensor: no weights here)
        self.register_buffer("weight", torch.empty(0, device=weight.codes.device), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        library = _library() if x.device.type == "cpu" and x.dtype == torch.float32 else None
        if library is None:
            return F.linear(x, self.qweight.dequantize().to(x.dtype), self.bias)
        rows, w, threads = rows.contiguous(), self.qweight, torch.get_num_threads()
        if rows.shape[0] > MANY_ROWS:
            dense = torch.empty(w.shape)
            library.dequantize_blocks(w.codes.data_ptr(), w.bits, w.scales.data_ptr(),
                                      None if w.mins is None else w.mins.data_ptr(), *w.shape, w.group, dense.data_ptr(), threads)
            out = F.linear(rows, dense)
        else:
            out = torch.empty(rows.shape[0], self.out_features)
            if w.bits == 4:
                library.quant_matmul_q4(rows.data_ptr(), rows.shape[0], self.in_features, w.codes.data_ptr(),
                                        w.scales.data_ptr(), w.mins.data_ptr(), self.out_features, w.group, out.data_ptr(), threads)
            else:
                library.quant_matmul_q8(rows.data_ptr(), rows.shape[0], self.in_features, w.codes.data_ptr(),
                                        w.scales.data_ptr(), self.out_features, w.group, out.data_ptr(), threads)
        if self.bias is not None:
            out += self.bias
        return out.view(*x.shape[:-1], self.out_features)


class QuantizedEmbedding(nn.Module):
    """An embedding table in blocks: a lookup dequantizes only the rows it takes."""

    def __init__(self, weight: QuantizedWeight):
        super().__init__()
        self.qweight = weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.qweight.dequantize(ids.reshape(-1)).view(*ids.shape, self.qweight.shape[1])


class MergedBlocks(MergedLinears):
    """Projections of one input (q/k/v, gate/up) over blocks as one kernel call: their blocks stacked once,
    each member's weight a view of the stack (no second copy). The CPU layer ops call it as they call
    MergedLinears (backends/cpu/linear.py): one call where there were three or two."""

    def __init__(self, members: list[QuantizedLinear]):
        weights = [m.qweight for m in members]
        self.members, self.sizes, self.calls = members, [w.shape[0] for w in weights], 0
        cat = lambda name: torch.cat([getattr(w, name) for w in weights])  # noqa: E731
        first = weights[0]
        stacked = QuantizedWeight(cat("codes"), cat("scales"), None if first.mins is None else cat("mins"), first.bits,
                                  first.group, (sum(self.sizes), first.shape[1]))
        biases = [m.bias for m in members]
        self.linear = QuantizedLinear(stacked, None if biases[0] is None else torch.cat(biases))
        start = 0
        for member, size in zip(members, self.sizes):
            member.qweight = QuantizedWeight(stacked.codes[start : start + size], stacked.scales[start : start + size],
                                             None if stacked.mins is None else stacked.mins[start : start + size],
                                             first.bits, first.group, (size, first.shape[1]))
            member.merged, start = self, start + size

    def usable(self, x: torch.Tensor) -> bool:
        return True  # a QuantizedLinear takes any input

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.linear(x)


def merge_blocks(model: nn.Module) -> int:
    """Merge each q/k/v and gate/up whose members are all blocks of one kind; returns how many groups."""
    merged = 0
    for module in list(model.modules()):
        for names in MERGED:
            members = [getattr(module, name, None) for name in names]
            if all(isinstance(m, QuantizedLinear) for m in members) and len(
                    {(m.qweight.bits, m.qweight.group, m.in_features, m.bias is None) for m in members}) == 1:
                MergedBlocks(members)
                merged += 1
    return merged


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the model's weights as it holds them: parameters, buffers and weight blocks, each once."""
    seen, total = set(), 0
    for module in model.modules():
        tensors = list(module.parameters(recurse=False)) + list(module.buffers(recurse=False))
        qweight = getattr(module, "qweight", None)
        if qweight is not None:
            tensors += [t for t in (qweight.codes, qweight.scales, qweight.mins) if t is not None]
        for t in tensors:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
    return total


def _linear(module: nn.Module) -> nn.Module:
    return getattr(module, "linear", module)  # a PackedLinear (backends/cpu/linear.py) wraps the nn.Linear


def quantize_model(model: nn.Module, scheme: str, group: int = 32, gguf_path: str | Path | None = None) -> None:
    """Swap the model's projections (and, for gguf, its embedding and head) for blocks, in place.

    int8: per output channel; int4: groups of `group` with a minimum; gguf: the file's own blocks (Q4_1, Q8_0)
    as they are, which the float32 path holds dequantized (the same weights). ValueError, one line, where
    the scheme cannot apply.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown quantization {scheme!r}; choose from {', '.join(SCHEMES)}")
    if scheme == "none":
        return
    if scheme == "gguf":
        _load_gguf_blocks(model, gguf_path)
        merge_blocks(model)
        return
    for layer in model.model.layers:
        for name in PROJECTIONS.values():
            parent_name, child = name.split(".")
            parent = getattr(layer, parent_name)
            linear = _linear(getattr(parent, child))
            weight = quantize_int8(linear.weight) if scheme == "int8" else quantize_int4(linear.weight, group)
            setattr(parent, child, QuantizedLinear(weight, linear.bias))
    merge_blocks(model)


def _load_gguf_blocks(model: nn.Module, gguf_path: str | Path | None) -> None:
    import gguf
    import numpy as np

    if gguf_path is None:
        raise ValueError("quantization 'gguf' runs a GGUF file's own blocks: the model must come from a GGUF file "
                         "(the bundled SmolLM2 does)")
    config = model.config
    tensors = {t.name: t for t in gguf.GGUFReader(str(gguf_path)).tensors}

    def blocks(name: str, shape: tuple[int, int]) -> QuantizedWeight:
        tensor = tensors[name]
        return from_gguf_blocks(tensor.tensor_type.name, np.asarray(tensor.data), shape)

    heads = {"attn_q": config.num_heads, "attn_k": config.num_kv_heads}
    for i, layer in enumerate(model.model.layers):
        for short, name in PROJECTIONS.items():
            parent_name, child = name.split(".")
            parent = getattr(layer, parent_name)
            linear = _linear(getattr(parent, child))
            weight = blocks(f"blk.{i}.{short}.weight", tuple(linear.weight.shape))
            if short in heads:  # llama.cpp stores q and k with each head's rotary halves interleaved
                weight = weight.rows(_unpermute_rows(weight.shape[0], heads[short]))
            setattr(parent, child, QuantizedLinear(weight, linear.bias))
    embedding = blocks("token_embd.weight", tuple(model.model.embed_tokens.weight.shape))
    model.model.embed_tokens = QuantizedEmbedding(embedding)
    if config.tie_word_embeddings:
        model.lm_head = QuantizedLinear(embedding)


def _unpermute_rows(rows: int, heads: int) -> torch.Tensor:
    """The row order that undoes llama.cpp's interleaving of each head's two rotary halves."""
    half = rows // heads // 2
    return torch.arange(rows).view(heads, half, 2).transpose(1, 2).reshape(rows)


def gguf_source(model) -> Path | None:
    """The GGUF file a model name is loaded from: the bundled SmolLM2's; None for any other."""
    if model in (None, "smollm2"):
        from miniyaie.model.loader import bundled_gguf

        return bundled_gguf()
    return None


def quantize_loaded(loaded, source, scheme: str) -> None:
    """The engine's hook: `loaded.model` (from `source`, a name or a path) in blocks; ModelLoadError (one line) where
    the scheme cannot apply."""
    from miniyaie.engine.errors import ModelLoadError

    try:
        quantize_model(loaded.model, scheme, gguf_path=gguf_source(source))
    except ValueError as exc:
        raise ModelLoadError(f"quantization {scheme!r}: {exc}") from None
