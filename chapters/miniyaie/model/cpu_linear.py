"""Linear layers on oneDNN with weights packed once: the CPU backend's matmuls.

On a CPU the step is mostly matmuls (95% of a decode step of SmolLM2 with
attention left out, torch.profiler). `F.linear` on a float32 CPU tensor
calls MKL's sgemm, which repacks the weight into its blocked layout on
every call and is tuned for Intel's processors (on the course's AMD one it
ran at 150-225 GFLOP/s at 64-256 rows, oneDNN at 345-520).
oneDNN (also inside torch, as `torch.ops.mkldnn`) takes a weight reordered
once into its own layout and picks its kernels from the CPU's features:
1.8 to 3.6x faster here at the engine's batch shapes (book/src/ch05_performance.md).
vLLM's CPU backend runs its linears on oneDNN for the same reason.

`pack_linears(model)` swaps every plain `nn.Linear` of a model for a
`PackedLinear` holding the reordered weight (the original stays inside it,
so `unpack_linears` restores the model exactly). The results equal
`F.linear` up to float32 rounding (sums in another order).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BATCH_HINT = 64  # rows the packed layout is tuned for; 1 is slow for big batches, 64 and 512 are alike


def packing_available(device: torch.device | str, dtype: torch.dtype) -> bool:
    return torch.device(device).type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()


class PackedLinear(nn.Module):
    """`linear` with its weight in oneDNN's layout; `linear` itself is kept (and shares the weight)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.linear = linear
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), BATCH_HINT)
        self.calls = 0  # a test checks that the engine's steps go through here

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if x.dtype != torch.float32 or x.device.type != "cpu" or x.requires_grad:
            return F.linear(x, self.linear.weight, self.linear.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.linear.bias, "none", [], "")

    @property
    def weight(self) -> torch.Tensor:  # code that reads layer.weight (shapes, dtypes) sees the real one
        return self.linear.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.linear.bias


def _swap(model: nn.Module, want, make) -> int:
    swapped = 0
    for module in list(model.modules()):
        if isinstance(module, PackedLinear):
            continue  # its own `linear` stays plain inside it
        for name, child in list(module.named_children()):
            if want(child):
                setattr(module, name, make(child))
                swapped += 1
    return swapped


def pack_linears(model: nn.Module) -> int:
    """Every plain nn.Linear of `model` (not subclasses: a tensor-parallel layer has its own forward)
    becomes a PackedLinear; returns how many. Packing twice packs nothing more."""
    return _swap(model, lambda m: type(m) is nn.Linear, PackedLinear)


def unpack_linears(model: nn.Module) -> int:
    """Undo pack_linears: the original nn.Linear modules back in place."""
    return _swap(model, lambda m: isinstance(m, PackedLinear), lambda m: m.linear)
