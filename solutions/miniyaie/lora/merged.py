"""LoRA over merged projections: q/k/v (and gate/up) stay one matmul, each member gets its own delta (Task 11.5).

The cpu backend and the GPU path run the projections that read one input as one matmul over their
stacked weights (backends/cpu/linear.py MergedLinears, backends/merged_projections.py): the model's
layer ops get the three projections and hand back three slices of one output. A LoRA-wrapped
projection is not a plain linear, so those ops would fall back to three matmuls. `LoRAProjectionOps`
wraps the layer ops instead: it asks the inner ops to project with the base modules (merged as
before), then adds the members' deltas to their slices. The members' A matrices sit side by side in
one stack (LoRASlots keeps a group's A as [slots, layers, members * max_rank, in]), so the shrink of
the whole group is one matmul per segment, as in vLLM's merged QKV LoRA layers; each member's expand
writes only its own slice. On a CPU the provided C++ kernel (backends/cpu/lora_delta.py) does the
same for every adapter of the step in one call, where it runs; add_merged_lora is its oracle.
"""

from __future__ import annotations

import torch

from miniyaie.backends.cpu import lora_delta
from miniyaie.lora.batched import Segments
from miniyaie.model.layers import LayerOps


# ANCHOR: add_merged_lora
def add_merged_lora(outputs: tuple[torch.Tensor, ...], x: torch.Tensor, segments: Segments, a_group: torch.Tensor,
                    bs: list[torch.Tensor], scaling: torch.Tensor) -> None:
    """Add each member's LoRA delta to its own output, in place, with one shrink per segment for all members.

    outputs[j]: member j's [rows, out_j] (often views: slices of one merged matmul's output);
    x: [rows, in]; a_group: [slots, members * R, in], member j's A [slots, R, in] being rows
    j * R .. (j + 1) * R - 1 (R = max rank, bs[j].shape[-1]); bs[j]: [slots, out_j, R]; scaling: [slots].
    Afterwards outputs[j][i] has gained scaling[s] * (x[i] @ A_j[s]^T) @ B_j[s]^T for every row i
    of a segment of slot s, exactly what add_lora gives member j alone; other rows untouched.
    Asserted: equal to each member's add_lora, for q/k/v of unequal widths and gate/up; at most one
    product with x (one shrink) per segment, whatever the number of members.
    """
    # Nudge: write out the shapes of one segment's shrink by the whole group's A, and of what each member's expand takes.
    # Hint 1: One matmul of a segment's rows by the whole group's A gives [rows, members * R]:
    #   member j's intermediate is its own R columns, and only member j's B may expand them, into
    #   member j's output alone. The widths of the outputs differ (q is wider than k and v with
    #   grouped-query attention): take each member's slice by R, never by the outputs' widths.
    # Hint 2: For each segment (as in add_lora): rows = order[start : start + length]; shrunk =
    #   x[rows] @ a_group[slot].T * scaling[slot]; for each member j: outputs[j].index_add_(0,
    #   rows, shrunk[:, j * R : (j + 1) * R] @ bs[j][slot].T).
    # Hint 3:
    #   R = a_group.shape[1] // len(outputs)   (the max rank)
    #   for start, length, slot in segments:
    #       rows = order[start : start + length]
    #       shrunk = (x[rows] @ a_group[slot].T) * scaling[slot]
    #       for j, (out, b) in enumerate(zip(outputs, bs)):
    #           out.index_add_(0, rows, (shrunk[:, j * R : (j + 1) * R] @ b[slot].T).to(out.dtype))
    # BEGIN SOLUTION 11.5: The model hook and one shrink for merged projections
    rank = a_group.shape[1] // len(outputs)
    bounds = zip(segments.starts.tolist(), segments.lengths.tolist(), segments.slots.tolist())
    for start, length, slot in bounds:
        rows = segments.order[start : start + length]
        shrunk = (x[rows] @ a_group[slot].T) * scaling[slot].to(x.dtype)
        for j, (out, b) in enumerate(zip(outputs, bs)):
            out.index_add_(0, rows, (shrunk[:, j * rank : (j + 1) * rank] @ b[slot].T).to(out.dtype))
    # END SOLUTION
# ANCHOR_END: add_merged_lora


def _group_weights(projections: tuple) -> tuple[torch.Tensor, list[torch.Tensor]] | None:
    """The members' stacked A [slots, members * R, in] and their Bs, when they are one group of one layer."""
    first = projections[0]
    group = tuple(p.module for p in projections)
    if group not in first.slots.a or any(p.slots is not first.slots or p.layer != first.layer for p in projections):
        return None
    return first.slots.a[group][:, first.layer], [p.lora_weights()[1] for p in projections]


class LoRAProjectionOps(LayerOps):
    """The model's layer ops with LoRA: merged projections still run as one matmul, plus each member's delta."""

    def __init__(self, inner: LayerOps):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)  # the wrapped ops' counters (calls, merged_calls)

    def project(self, x, *projections):
        from miniyaie.lora.layer import LoRALinear, add_delta

        if len(projections) < 2 or not all(isinstance(p, LoRALinear) for p in projections):
            return self.inner.project(x, *projections)
        outputs = self.inner.project(x, *(p.base for p in projections))
        rows = x.reshape(-1, x.shape[-1])
        segments = projections[0].batch.active(rows.shape[0])
        if segments is None:
            return outputs
        flat = tuple(out.reshape(-1, out.shape[-1]) for out in outputs)
        weights = None if x.is_cuda else _group_weights(projections)
        if weights is None:  # a GPU (the kernel, member by member) or projections of no one group
            for out, p in zip(flat, projections):
                add_delta(out, rows, segments, *p.lora_weights(), p.slots.scaling)
        elif not lora_delta.add_deltas(flat, rows, segments, weights[0], weights[1], projections[0].slots.scaling):
            add_merged_lora(flat, rows, segments, weights[0], weights[1], projections[0].slots.scaling)  # the torch path
        return tuple(f if f.data_ptr() == out.data_ptr() else f.view(out.shape) for f, out in zip(flat, outputs))

    def swiglu(self, x, gate_proj, up_proj, down_proj):
        from miniyaie.lora.layer import LoRALinear

        if not (isinstance(gate_proj, LoRALinear) and isinstance(up_proj, LoRALinear)):
            return self.inner.swiglu(x, gate_proj, up_proj, down_proj)
        gate, up = self.project(x, gate_proj, up_proj)
        # The wrapped ops apply the activation to the halves already computed: their kernel, their counter.
        return self.inner.swiglu(x, lambda _: gate, lambda _: up, down_proj)

    def rms_norm(self, x, weight, eps: float, residual=None):
        return self.inner.rms_norm(x, weight, eps, residual)

    def rotary(self, q, k, cos, sin):
        return self.inner.rotary(q, k, cos, sin)
