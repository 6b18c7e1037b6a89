"""The batched LoRA multiply on a CPU: a step's rows grouped by adapter, one pair of matmuls per adapter (Task 11.3).

A step's rows belong to requests of several adapters and of none. For row i with slot s_i the
projection's output gains scaling[s_i] * (x_i @ A[s_i]^T) @ B[s_i]^T: a shrink to r numbers and an
expand back. Done row by row it is two tiny matrix-vector products per row, each reading its
adapter's A and B: slow in Python and wasteful in memory traffic. Punica's SGMV ("segmented gather
matrix-vector") sorts the rows by adapter into segments and runs one matmul pair per segment, which
reads each adapter's weights once per step, whatever the number of its rows. The grouping depends
only on the rows' slots, so it is done once per step (`group_rows`) and shared by every projection
of every layer; this is what the step's LoRABatch holds (layer.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Segments:
    """A step's rows grouped by slot: segment j is rows order[starts[j] : starts[j] + lengths[j]], all of slot slots[j].

    Rows without an adapter are in no segment. Every row with an adapter is in exactly one
    segment; no two segments have the same slot. `order`, `starts`, `lengths` are int64 tensors and
    `slots` of slot_of_row's integer type, on the rows' device (the Triton kernel reads them);
    `num_rows` is the step's row count.
    """

    order: torch.Tensor
    starts: torch.Tensor
    lengths: torch.Tensor
    slots: torch.Tensor
    num_rows: int

    def __len__(self) -> int:
        return len(self.slots)


# ANCHOR: group_rows
def group_rows(slot_of_row: torch.Tensor) -> Segments:
    """The rows of a step grouped into one segment per slot present (slot -1: no adapter, in no segment).

    slot_of_row: [rows] an integer tensor, -1 or a slot number for each row. Asserted: the segments' rows are exactly the
    rows with an adapter, each once, a segment's rows all have its slot, and the slots are distinct.
    """
    # Idea: group slots [2, -1, 0, 2, 0] by hand first, and name each step you took.
    # Stuck? `miniyaie hint 11.3` prints hints, one level at a time.
    # TODO(Task 11.3): The batched LoRA multiply on a CPU. Replace this line with your code.
    raise NotImplementedError('Chapter 11, Task 3: The batched LoRA multiply on a CPU — see book/src/ch11_lora.md')
# ANCHOR_END: group_rows


# ANCHOR: add_lora
def add_lora(y: torch.Tensor, x: torch.Tensor, segments: Segments, a: torch.Tensor, b: torch.Tensor,
             scaling: torch.Tensor) -> torch.Tensor:
    """y[i] += scaling[s] * (x[i] @ a[s]^T) @ b[s]^T for every row i of a segment of slot s, in place; returns y.

    y: [rows, out], x: [rows, in] (one step's rows, in step order); a: [slots, r, in]; b: [slots,
    out, r] (one layer's module, any strides: views of LoRASlots' stacks); scaling: [slots]. Rows
    in no segment are left exactly as they were. Reads each segment's adapter once: one shrink and
    one expand per segment, however many rows it has. Asserted: equal to the row-by-row definition
    for any mix of slots, ranks and shapes, y's other rows untouched, and faster than a row loop.
    """
    # Idea: a segment's rows are scattered through the step: how are they read together, and put back?
    # Stuck? `miniyaie hint 11.3` prints hints, one level at a time.
    # TODO(Task 11.3): The batched LoRA multiply on a CPU. Replace this line with your code.
    raise NotImplementedError('Chapter 11, Task 3: The batched LoRA multiply on a CPU — see book/src/ch11_lora.md')
# ANCHOR_END: add_lora


def add_lora_reference(y: torch.Tensor, x: torch.Tensor, slot_of_row: torch.Tensor, a: torch.Tensor,
                       b: torch.Tensor, scaling: torch.Tensor) -> torch.Tensor:
    """The definition, one row at a time (what the tests and the benchmark compare with); in place, returns y."""
    for i, slot in enumerate(slot_of_row.tolist()):
        if slot >= 0:
            y[i] += ((x[i] @ a[slot].T) * scaling[slot].to(x.dtype) @ b[slot].T).to(y.dtype)
    return y
