"""Chapter 11's LoRA deltas on a CPU in one C++ call per projection (lora_delta.cpp): the provided fast path.

Why: chapter 11's grouped torch path (lora/batched.py add_lora, lora/merged.py add_merged_lora) does
two small matmuls per adapter per projection; a step of 8 adapters over SmolLM2's 30 layers is
thousands of them, and on a CPU their fixed cost, not the few multiply-adds, was the step's LoRA
time (book/src/ch11_lora.md, Measured). The kernel does every adapter of the step in one call.

Same contract as add_merged_lora (add_lora is its one-member case), same results up to the order
of the additions. `add_deltas` returns False, having written nothing, where the kernel does not
apply: no library, tensors not float32 on the CPU or laid out otherwise, autograd recording, the
learner's chapter 11 selected (their torch path is what runs then: MINIYAIE_IMPL), or
MINIYAIE_LORA_KERNEL=0 (to measure or compare the torch path in the same process).
"""

from __future__ import annotations

import ctypes
import functools
import os

import torch

from miniyaie import _switch
from miniyaie.backends.cpu import kernels as cpu_kernels

ENV = "MINIYAIE_LORA_KERNEL"  # "0": the torch path even where the kernel could run
calls = 0  # kernel calls made in this process: what a test reads to see that the model's projections reach it


@functools.cache
def _reference_lora() -> bool:
    """Whether miniyaie.lora is the reference's: a learner's chapter 11 runs their own code, not this kernel."""
    return _switch.selected_root("lora") == _switch.SOLUTIONS_ROOT  # asked of the switch: no import up the house


def enabled() -> bool:
    """The kernel is built, chapter 11 is the reference's, and MINIYAIE_LORA_KERNEL does not turn it off."""
    return os.environ.get(ENV, "1") != "0" and _reference_lora() and cpu_kernels.load() is not None


def _fits(x: torch.Tensor, a: torch.Tensor, bs, outputs, scaling: torch.Tensor) -> bool:
    tensors = (x, a, scaling, *bs, *outputs)
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    rank = bs[0].shape[-1]
    return (x.dim() == 2 and x.stride(1) == 1 and a.dim() == 3 and a.stride(2) == 1 and a.shape[-1] == x.shape[1]
            and a.shape[1] == rank * len(bs) and scaling.is_contiguous()
            and all(b.dim() == 3 and b.stride(2) == 1 and b.shape[-1] == rank for b in bs)
            and all(y.dim() == 2 and y.stride(1) == 1 and y.shape[0] == x.shape[0] and y.shape[1] == b.shape[1]
                    for y, b in zip(outputs, bs)))


_last: list = [None, None, 0, 0]  # the last Segments seen, its tensors as the kernel reads them, its lowest and
# highest slot: one step's segments serve every projection of every layer, converted and checked once


def segment_tensors(segments, num_slots: int) -> tuple[torch.Tensor, ...]:
    """order, starts, lengths, slots as contiguous int64; IndexError for a slot the stacks do not have."""
    if _last[0] is not segments:
        tensors = tuple(t.to(torch.int64).contiguous() for t in (segments.order, segments.starts, segments.lengths,
                                                                 segments.slots))
        _last[:] = [segments, tensors, int(tensors[3].min()), int(tensors[3].max())]
    _, tensors, low, high = _last
    if low < 0 or high >= num_slots:
        raise IndexError(f"a segment's slot {low if low < 0 else high} is out of range: the stacks have {num_slots} slots")
    return tensors


def add_deltas(outputs: tuple[torch.Tensor, ...], x: torch.Tensor, segments, a: torch.Tensor,
               bs: list[torch.Tensor], scaling: torch.Tensor) -> bool:
    """outputs[j][i] += scaling[s] * (x[i] @ A_j[s]^T) @ B_j[s]^T for every row i of a segment of slot s; True if done.

    outputs[j]: [rows, out_j]; x: [rows, in]; a: [slots, members * R, in], member j's A its rows
    j * R .. (j + 1) * R - 1; bs[j]: [slots, out_j, R]; scaling: [slots]; segments: chapter 11's
    Segments. False (nothing written) where the kernel is not to run (`enabled`) or does not take
    the tensors: the caller's torch path then. IndexError for a segment's slot the stacks lack.
    """
    return enabled() and run_kernel(outputs, x, segments, a, bs, scaling)


def run_kernel(outputs: tuple[torch.Tensor, ...], x: torch.Tensor, segments, a: torch.Tensor, bs: list[torch.Tensor],
               scaling: torch.Tensor) -> bool:
    """add_deltas whichever chapter 11 is selected (what the kernel's own tests call); False: no library, or
    tensors it does not take (not float32 on the CPU, laid out otherwise, autograd recording)."""
    library = cpu_kernels.load()
    if library is None or not _fits(x, a, bs, outputs, scaling):
        return False
    global calls
    if len(segments) == 0:
        return True
    order, starts, lengths, slots = segment_tensors(segments, min(a.shape[0], scaling.numel(), *(b.shape[0] for b in bs)))
    fields = []  # per member, as lora_delta.cpp reads them: B, its slot and row strides, out, y, y's row stride
    for y, b in zip(outputs, bs):
        fields += [b.data_ptr(), b.stride(0), b.stride(1), y.shape[1], y.data_ptr(), y.stride(0)]
    members = (ctypes.c_int64 * len(fields))(*fields)
    library.lora_delta(
        x.data_ptr(), x.stride(0), x.shape[1], order.data_ptr(), starts.data_ptr(), lengths.data_ptr(), slots.data_ptr(),
        len(slots), a.data_ptr(), a.stride(0), a.stride(1), bs[0].shape[-1], scaling.data_ptr(), ctypes.addressof(members),
        len(bs), torch.get_num_threads())
    calls += 1
    return True
