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

It also merges the projections that read the same input, q/k/v and
gate/up, into one `MergedLinears` (their weights stacked, packed once): one
oneDNN call instead of three or two. At one row (a single client's decode
step) each call's fixed cost shows: SmolLM2's 150 projection calls a step
took 17-21 ms as five calls a layer and 13-14 ms as two
(solutions/miniyaie/bench/lab/bench_merged_linears.py). vLLM's QKVParallelLinear and
MergedColumnParallelLinear do the same. The layer ops reach the group
through `CpuLayerOps.project` and `.swiglu`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BATCH_HINT = 64  # rows the packed layout is tuned for; 1 is slow for big batches, 64 and 512 are alike


def packing_available(device: torch.device | str, dtype: torch.dtype) -> bool:
    return torch.device(device).type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()


MERGED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # children merged into one matmul


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), BATCH_HINT)


def _onednn_takes(x: torch.Tensor) -> bool:
    """A float32 CPU input with no gradient to carry: what the packed matmul computes (it is invisible to autograd)."""
    return x.dtype == torch.float32 and x.device.type == "cpu" and not x.requires_grad


# ANCHOR: packed_linear
class PackedLinear(nn.Module):
    """`linear` with its weight in oneDNN's layout; `linear` itself is kept (and shares the weight).

    A layer merged with others keeps no packed copy of its own (`merged` is the group,
    called through the layer ops); called alone, it runs F.linear.
    """

    def __init__(self, linear: nn.Linear, pack: bool = True):
        super().__init__()
        self.linear = linear
        with torch.no_grad():
            self.packed = _reorder(linear.weight) if pack else None
        self.merged: MergedLinears | None = None
        self.calls = 0  # a test checks that the engine's steps go through here

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.packed is None or not _onednn_takes(x):
            return F.linear(x, self.linear.weight, self.linear.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.linear.bias, "none", [], "")
# ANCHOR_END: packed_linear

    @property
    def weight(self) -> torch.Tensor:  # code that reads layer.weight (shapes, dtypes) sees the real one
        return self.linear.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.linear.bias


class MergedLinears:
    """Several linears of one input as one oneDNN matmul over their stacked weights.

    A plain object, not a module: the model's state dict and module tree stay as they were.
    `members` are the PackedLinear layers it stands for, in order.
    """

    def __init__(self, members: list[PackedLinear]):
        self.members = members
        self.sizes = [m.weight.shape[0] for m in members]
        with torch.no_grad():
            self.packed = _reorder(torch.cat([m.weight for m in members]))
            biases = [m.bias for m in members]
            self.bias = None if biases[0] is None else torch.cat(biases)
        self.calls = 0  # a test checks that the engine's steps go through here

    def matches(self, projections: tuple) -> bool:
        return len(projections) == len(self.members) and all(p is m for p, m in zip(projections, self.members))

    def usable(self, x: torch.Tensor) -> bool:
        return _onednn_takes(x)

    def stacked(self, x: torch.Tensor) -> torch.Tensor:
        """All members' outputs side by side in one tensor [..., sum(sizes)]."""
        self.calls += 1
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each member's output: views of the stacked result (rows not contiguous)."""
        return self.stacked(x).split(self.sizes, dim=-1)


def _merge(model: nn.Module) -> None:
    """Replace each group of MERGED children that are all plain nn.Linear of one input by PackedLinears of one group."""
    for module in list(model.modules()):
        for names in MERGED:
            linears = [getattr(module, name, None) for name in names]
            if not all(type(linear) is nn.Linear for linear in linears):
                continue
            if len({(linear.in_features, linear.bias is None, linear.weight.dtype) for linear in linears}) != 1:
                continue
            members = [PackedLinear(linear, pack=False) for linear in linears]
            group = MergedLinears(members)
            for name, member in zip(names, members):
                member.merged = group
                setattr(module, name, member)


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
    becomes a PackedLinear, q/k/v and gate/up merged (MERGED); returns how many. Packing twice packs nothing more."""
    before = sum(isinstance(m, PackedLinear) for m in model.modules())
    _merge(model)
    _swap(model, lambda m: type(m) is nn.Linear, PackedLinear)
    return sum(isinstance(m, PackedLinear) for m in model.modules()) - before


def unpack_linears(model: nn.Module) -> int:
    """Undo pack_linears: the original nn.Linear modules back in place."""
    return _swap(model, lambda m: isinstance(m, PackedLinear), lambda m: m.linear)
