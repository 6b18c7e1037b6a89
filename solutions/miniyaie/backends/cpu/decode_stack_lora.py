"""LoRA adapters (chapter 11) in the CPU decode stack: each linear's deltas added in C++ right after it.

Why: with adapters the model's projections are wrapped (their layer ops too), so the stack handed every
decode step back to the layers: some 450 kernel calls a step from Python plus the wrapping, where the
stack makes one call. Here the stack keeps the step: after each of a layer's four linears (q/k/v, o,
gate/up, down) decode_stack.cpp calls lora_delta.cpp, the very kernel the wrapped projections call
(lora_delta.py), with the same arguments: the step's rows grouped by adapter slot (chapter 11's
Segments), converted once a step; the adapters' stacked A and B, read where the slots keep them.

What the stack is given comes from the side that wraps the model (lora_serving/residency.py): the backends
import nothing of chapter 11. It runs a step's deltas only where lora_delta.py would (`lora_delta.enabled`:
the kernel built, chapter 11 the reference's, MINIYAIE_LORA_KERNEL not 0); elsewhere the layers run the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from miniyaie.backends.cpu import lora_delta

MAX_MEMBERS = 3  # q/k/v; what decode_stack.cpp reserves per linear of its LoRA table


@dataclass
class StackLoRA:
    """What the decode stack needs to add a step's LoRA deltas.

    groups[l]: layer l's four linears in the stack's order (q/k/v, o, gate/up, down), each as (A [slots,
    members * rank, in], [B [slots, out_j, rank] of each member]): member j's A its rows j * rank ..;
    scaling [slots]; segments(rows): the step's Segments for a step of `rows` rows, None when no row has an
    adapter; ops: the model's layer ops with LoRA (the stack takes steps only while the model has these);
    base(projection): the module a wrapped projection runs (the one the stack's table points into).
    """

    groups: list[list[tuple[torch.Tensor, list[torch.Tensor]]]]
    scaling: torch.Tensor
    segments: Callable[[int], object]
    ops: object
    base: Callable[[torch.nn.Module], torch.nn.Module]


def why_not(lora: StackLoRA, widths: list[tuple[int, int]], num_layers: int) -> str | None:
    """Why the stack cannot add these adapters' deltas (widths: the four linears' (in, out)), or None if it can."""
    if not lora_delta.enabled():
        return "the LoRA kernel does not run (not built, a learner's chapter 11, or MINIYAIE_LORA_KERNEL=0)"
    if len(lora.groups) != num_layers:
        return f"LoRA for {len(lora.groups)} layers, the model has {num_layers}"
    rank = lora.groups[0][0][1][0].shape[-1]
    tensors = [lora.scaling, *(t for layer in lora.groups for a, bs in layer for t in (a, *bs))]
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors) or not lora.scaling.is_contiguous():
        return "adapter stacks not float32 on the CPU"
    for layer in lora.groups:
        for (a, bs), (fan_in, fan_out) in zip(layer, widths, strict=True):
            if not 1 <= len(bs) <= MAX_MEMBERS or a.dim() != 3 or a.stride(2) != 1 or a.shape[1:] != (len(bs) * rank, fan_in):
                return f"an A stack of shape {tuple(a.shape)} for a linear of {fan_in} inputs and {len(bs)} members"
            if any(b.dim() != 3 or b.stride(2) != 1 or b.shape[-1] != rank for b in bs) or sum(b.shape[1] for b in bs) != fan_out:
                return f"B stacks of out features {[b.shape[1] for b in bs]} for a linear of {fan_out}"
    return None


def table(lora: StackLoRA) -> torch.Tensor:
    """The LoRA table decode_stack.cpp reads: per layer, per linear, A (address, slot and row strides), the
    number of members, then each member's B (address, slot and row strides, out features), zeros for the rest."""
    rows = []
    for layer in lora.groups:
        row = []
        for a, bs in layer:
            row += [a.data_ptr(), a.stride(0), a.stride(1), len(bs)]
            for b in bs:
                row += [b.data_ptr(), b.stride(0), b.stride(1), b.shape[1]]
            row += [0] * 4 * (MAX_MEMBERS - len(bs))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.int64)


def step_fields(lora: StackLoRA, lora_table: torch.Tensor, segments) -> tuple[torch.Tensor, tuple]:
    """The step's LoRA as decode_stack.cpp reads it (its STEP_* fields), and the tensors it points into (keep them
    alive for the call). IndexError for a segment's slot the stacks do not have."""
    num_slots = min(lora.scaling.numel(), *(t.shape[0] for a, bs in lora.groups[0] for t in (a, *bs)))
    order, starts, lengths, slots = lora_delta.segment_tensors(segments, num_slots)
    rank = lora.groups[0][0][1][0].shape[-1]
    fields = [lora_table.data_ptr(), rank, lora.scaling.data_ptr(), order.data_ptr(), starts.data_ptr(),
              lengths.data_ptr(), slots.data_ptr(), slots.numel()]
    return torch.tensor(fields, dtype=torch.int64), (order, starts, lengths, slots)
