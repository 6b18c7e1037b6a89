"""q/k/v and gate/up as one matmul each: the GPU path's projections.

Why: at a decode step's few rows every projection is a small matmul whose
launch and weight read cost more than its arithmetic; the projections that
read the same input can be one matmul over their stacked weights (vLLM's
QKVParallelLinear and MergedColumnParallelLinear). `merge_projections`
stacks each group's weights once into one tensor and makes the layers'
own weights views of it, so the model holds no second copy and the unmerged
path still computes the same thing. `MergedProjectionOps` wraps the model's
layer ops: `project` runs a merged group as one `F.linear` and returns its
column slices; `swiglu` runs the merged gate/up matmul and hands its two
halves to the wrapped ops' own SiLU-and-mul (chapter 4's Triton kernel under
the triton backend): only the matmuls merge, the activation stays the
learner's. Everything else goes to the wrapped ops, whose counters stay readable.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from miniyaie.model import LayerOps

GROUPS = (("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj")))


@dataclass(eq=False)
class MergedProjection:
    """Stacked weights of linears that read the same input; `members` are those linears, in order."""

    weight: torch.Tensor  # [sum of out features, in features]
    bias: torch.Tensor | None
    sizes: list[int]  # out features of each member
    members: tuple[nn.Module, ...]

    def matches(self, projections: tuple) -> bool:
        return len(projections) == len(self.members) and all(p is m for p, m in zip(projections, self.members))


def _merge(linears: tuple[nn.Linear, ...]) -> MergedProjection:
    existing = getattr(linears[0], "merged_projection", None)
    if isinstance(existing, MergedProjection) and existing.matches(linears) \
            and all(lin.weight.data_ptr() == existing.weight[start:].data_ptr()
                    for lin, start in zip(linears, _starts(existing.sizes))):
        return existing  # merged before, weights still views of the stack
    with torch.no_grad():
        weight = torch.cat([lin.weight for lin in linears])
        has_bias = [lin.bias is not None for lin in linears]
        if any(has_bias) and not all(has_bias):
            raise ValueError("cannot merge linears where only some have a bias")
        bias = torch.cat([lin.bias for lin in linears]) if all(has_bias) else None
    sizes = [lin.out_features for lin in linears]
    for lin, start, size in zip(linears, _starts(sizes), sizes):
        lin.weight = nn.Parameter(weight[start : start + size], requires_grad=False)
        if bias is not None:
            lin.bias = nn.Parameter(bias[start : start + size], requires_grad=False)
    group = MergedProjection(weight, bias, sizes, tuple(linears))
    for lin in linears:
        lin.merged_projection = group
    return group


def _starts(sizes: list[int]) -> list[int]:
    return [sum(sizes[:i]) for i in range(len(sizes))]


def merge_projections(model) -> int:
    """Stack every layer's q/k/v and gate/up weights (once; again only if a weight was replaced). Returns the groups."""
    count = 0
    for layer in model.model.layers:
        for parent_name, names in GROUPS:
            parent = getattr(layer, parent_name)
            linears = tuple(getattr(parent, name) for name in names)
            if all(type(lin) is nn.Linear for lin in linears):  # the cpu backend's packed layers are left alone
                _merge(linears)
                count += 1
    return count


class MergedProjectionOps(LayerOps):
    """The model's layer ops, with merged groups run as one matmul; `merged_calls` counts those calls."""

    def __init__(self, inner: LayerOps):
        self.inner = inner
        self.merged_calls = {"project": 0, "swiglu": 0}

    def __getattr__(self, name):
        return getattr(self.inner, name)  # e.g. the wrapped ops' `calls` counters

    def project(self, x, *projections):
        group = getattr(projections[0], "merged_projection", None)
        if not (isinstance(group, MergedProjection) and group.matches(projections)):
            return self.inner.project(x, *projections)
        self.merged_calls["project"] += 1
        return F.linear(x, group.weight, group.bias).split(group.sizes, dim=-1)

    def swiglu(self, x, gate_proj, up_proj, down_proj):
        group = getattr(gate_proj, "merged_projection", None)
        if not (isinstance(group, MergedProjection) and group.matches((gate_proj, up_proj))):
            return self.inner.swiglu(x, gate_proj, up_proj, down_proj)
        self.merged_calls["swiglu"] += 1
        gate, up = F.linear(x, group.weight, group.bias).split(group.sizes, dim=-1)
        # The wrapped ops apply the activation to the halves already computed: their kernel, their counter.
        return self.inner.swiglu(x, lambda _: gate, lambda _: up, down_proj)

    def rms_norm(self, x, weight, eps: float, residual=None):
        return self.inner.rms_norm(x, weight, eps, residual)

    def rotary(self, q, k, cos, sin):
        return self.inner.rotary(q, k, cos, sin)
