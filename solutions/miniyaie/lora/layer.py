"""The model hook: a projection wrapped so that it adds its rows' LoRA deltas.

`apply_lora(model, slots)` (wrap.py) wraps the seven projections of every layer in a `LoRALinear` (the base
module inside it is untouched: an nn.Linear, the cpu backend's PackedLinear, chapter 10's
QuantizedLinear) and returns the `LoRABatch` they share. The runner sets the step's rows' slots on
it once per step, before the forward (`set_rows`, or `set_sequences` from each sequence's slot and
its query length); every wrapped projection of every layer reads the same segments, grouped once.
vLLM's punica wrapper works the same way (`update_metadata` once a step, read by every LoRA layer).

The model's layer ops are wrapped too (merged.py): projections that the backend runs as one matmul
(q/k/v, gate/up) stay one matmul, and each member's delta is added to its own slice.
"""

from __future__ import annotations

import torch
from torch import nn

from miniyaie.backends.cpu import lora_delta
from miniyaie.lora.batched import Segments, add_lora, group_rows
from miniyaie.lora.slots import LoRASlots


class LoRABatch:
    """The current step's rows, grouped by adapter slot; `segments` is None when no row has an adapter."""

    def __init__(self):
        self.segments: Segments | None = None
        self.num_rows: int | None = None  # rows the step was set for (None: not set; projections add nothing)

    def set_rows(self, slot_of_row: torch.Tensor | list[int]) -> None:
        """The slot of every row of the next forward, in step order (-1: no adapter)."""
        slots = torch.as_tensor(slot_of_row, dtype=torch.long).reshape(-1)
        segments = group_rows(slots)
        self.num_rows = slots.numel()
        self.segments = segments if len(segments) else None

    def set_sequences(self, slot_of_sequence: list[int], query_lens: list[int], device: str | torch.device = "cpu") -> None:
        """A step of sequences: sequence i contributes query_lens[i] consecutive rows, all of its slot."""
        slots = torch.repeat_interleave(torch.tensor(slot_of_sequence, dtype=torch.long), torch.tensor(query_lens))
        self.set_rows(slots.to(device))

    def clear(self) -> None:
        self.segments, self.num_rows = None, None

    def active(self, rows: int) -> Segments | None:
        """The segments to add for a projection of `rows` rows (None: nothing to add)."""
        if self.num_rows is not None and rows != self.num_rows:
            raise ValueError(f"the step's LoRA rows were set for {self.num_rows} rows but a projection got {rows}: "
                             "set them once per step (LoRABatch.set_rows) before the forward")
        return self.segments


def add_delta(y: torch.Tensor, x: torch.Tensor, segments: Segments, a: torch.Tensor, b: torch.Tensor,
              scaling: torch.Tensor) -> None:
    """y += the rows' deltas: the Triton kernel on a GPU; on a CPU the provided C++ kernel where it runs
    (backends/cpu/lora_delta.py: one call for all adapters), else the grouped torch path."""
    if x.is_cuda:
        from miniyaie.lora.kernel import sgmv

        sgmv(y, x, segments, a, b, scaling)
    elif not lora_delta.add_deltas((y,), x, segments, a, [b], scaling):
        add_lora(y, x, segments, a, b, scaling)


class LoRALinear(nn.Module):
    """A projection plus its rows' LoRA deltas: base(x) + the batched multiply over the slots' layer and module."""

    def __init__(self, base: nn.Module, slots: LoRASlots, layer: int, module: str, batch: LoRABatch):
        super().__init__()
        self.base, self.slots, self.layer, self.module, self.batch = base, slots, layer, module, batch
        self.in_features, self.out_features = slots.shapes[module]

    @property
    def weight(self) -> torch.Tensor:  # code that reads a projection's weight (dtype, device, shape) sees the base's
        return self.base.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.base.bias

    def lora_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This layer's module in every slot: A [slots, max_rank, in], B [slots, out, max_rank] (views)."""
        return self.slots.a_of(self.module)[:, self.layer], self.slots.b[self.module][:, self.layer]

    # ANCHOR: lora_linear_forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """base(x) plus, for every row of the step's segments (self.batch), its adapter's delta; x [..., in].

        The rows are x's rows flattened to [rows, in] in step order; with no rows set on the batch
        (or none with an adapter) the base's output alone. Raises ValueError (LoRABatch.active) when the
        step was set for another number of rows, whatever it holds (rows without adapters too).
        Asserted: the model's logits equal peft's merged model's.
        """
        # Nudge: the batch knows the step's segments; what does this layer add, and to which tensor?
        # Hint 1: The base projection runs as if there were no adapters; the deltas are added to its
        #   output rows in place by add_delta, which picks the kernel or the torch path.
        # Hint 2: out = base(x); segments = batch.active(number of rows); if none, return out; else
        #   add_delta on out and x seen as 2-D, with this layer's lora_weights() and the slots' scaling.
        # Hint 3:
        #   out = base(x); rows = x.reshape(-1, in_features)
        #   segments = batch.active(rows.shape[0]); if segments is None: return out
        #   add_delta(out.view(-1, out_features), rows, segments, *lora_weights(), slots.scaling); return out
        # BEGIN SOLUTION 11.5: The model hook and one shrink for merged projections
        out = self.base(x).contiguous()
        rows = x.reshape(-1, self.in_features)
        segments = self.batch.active(rows.shape[0])
        if segments is None:
            return out
        add_delta(out.view(-1, self.out_features), rows, segments, *self.lora_weights(), self.slots.scaling)
        return out
        # END SOLUTION
    # ANCHOR_END: lora_linear_forward
