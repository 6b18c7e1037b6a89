"""Linear layers and the embedding over weight blocks, and a model's linears swapped for them.

A decode step at a small batch reads every weight once: its time is the bytes it reads. A 4-bit block
of 32 weights with two float16s is 20 bytes where float32 weights take 128. On a GPU the Triton kernel
(kernel.py) multiplies by the blocks, dequantizing in registers; on a CPU the C++ kernel
(backends/cpu/quant_matmul.cpp) does: one row reads the blocks and decodes them in registers; a few
rows (a batch of decodes) decode each weight row once into a cache-resident float32 buffer and multiply
it by every row from registers; a prefill chunk of many rows decodes the weights into float32 and hands
them to the float32 library, whose matmul is faster than ours once the step is bound by arithmetic.
Without either, the weights are dequantized for every call (the reference: slow, never wrong).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from miniyaie.backends.cpu.linear import MERGED, MergedLinears
from miniyaie.quant.blocks import QuantizedWeight

MANY_ROWS = 64  # above this many rows (a prefill chunk) a step decodes the weights and runs the float32 matmul


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

    kernel_max_rows = MANY_ROWS  # the most rows its one-step kernels take (backends/cpu/decode_stack.py reads it)

    def kernel_fields(self) -> list[int] | None:
        """This layer as backends/cpu/decode_stack.cpp reads it, or None where forward is not this class's."""
        return self._fields(rounds_activations=0) if type(self).forward is QuantizedLinear.forward else None

    def _fields(self, rounds_activations: int, tiles: list[int] = (0, 0, 0)) -> list[int]:
        """codes, bits, scales, mins, out and in features, group, bias (addresses; 0: none), 8-bit activations,
        and the weights laid out for AMX tiles (codes, scales, mins: weights/int8_activations.py; 0: none)."""
        w = self.qweight
        return [w.codes.data_ptr(), w.bits, w.scales.data_ptr(), 0 if w.mins is None else w.mins.data_ptr(),
                self.out_features, self.in_features, w.group, 0 if self.bias is None else self.bias.data_ptr(),
                rounds_activations, *tiles]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if x.is_cuda:  # the Triton kernel (Task 10.3)
            from miniyaie.quant.kernel import quant_matmul

            out = quant_matmul(x, self.qweight)
            return out if self.bias is None else out + self.bias
        library = _library() if x.device.type == "cpu" and x.dtype == torch.float32 else None
        if library is None:
            return F.linear(x, self.qweight.dequantize().to(x.dtype), self.bias)
        rows, w, threads = rows.contiguous(), self.qweight, torch.get_num_threads()
        mins = None if w.mins is None else w.mins.data_ptr()
        if rows.shape[0] > MANY_ROWS:  # a long prefill chunk: the float32 library's matmul wins
            dense = torch.empty(w.shape)
            library.dequantize_blocks(w.codes.data_ptr(), w.bits, w.scales.data_ptr(), mins, *w.shape, w.group,
                                      dense.data_ptr(), threads)
            out = F.linear(rows, dense)
        elif rows.shape[0] > 1:  # a batch of decodes: each weight decoded once, multiplied by every row
            out = torch.empty(rows.shape[0], self.out_features)
            library.quant_matmul_rows(rows.data_ptr(), rows.shape[0], self.in_features, w.codes.data_ptr(), w.bits,
                                      w.scales.data_ptr(), mins, self.out_features, w.group, out.data_ptr(), threads)
        else:  # one row: the blocks decoded in registers as they are read
            out = torch.empty(1, self.out_features)
            if w.bits == 4:
                library.quant_matmul_q4(rows.data_ptr(), 1, self.in_features, w.codes.data_ptr(), w.scales.data_ptr(),
                                        mins, self.out_features, w.group, out.data_ptr(), threads)
            else:
                library.quant_matmul_q8(rows.data_ptr(), 1, self.in_features, w.codes.data_ptr(), w.scales.data_ptr(),
                                        self.out_features, w.group, out.data_ptr(), threads)
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
    merges = [getattr(m.merged, "linear", None) for m in model.modules() if getattr(m, "merged", None) is not None]
    for module in [*model.modules(), *(linear for linear in merges if linear is not None)]:  # a merge's own buffers too
        tensors = list(module.parameters(recurse=False)) + list(module.buffers(recurse=False))
        qweight = getattr(module, "qweight", None)
        if qweight is not None:
            tensors += [t for t in (qweight.codes, qweight.scales, qweight.mins) if t is not None]
        for t in tensors:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
    return total


def bytes_per_weight(model: nn.Module) -> float:
    """What a step reads per weight: 4.0 for float32, about 0.72 for the bundled model's Q4_1/Q8_0 file."""
    weights = {}  # data pointer -> how many weights (a tied head and its embedding count once)
    for module in model.modules():
        blocks = getattr(module, "qweight", None)
        if blocks is not None:
            weights[blocks.codes.data_ptr()] = blocks.shape[0] * blocks.shape[1]
        weights.update((p.data_ptr(), p.numel()) for p in module.parameters(recurse=False))
    return weight_bytes(model) / sum(weights.values())


def float_linear(module: nn.Module) -> nn.Module:
    """The nn.Linear a layer holds (the CPU backend's PackedLinear wraps one, backends/cpu/linear.py)."""
    return getattr(module, "linear", module)
