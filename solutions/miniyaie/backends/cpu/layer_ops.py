"""The cpu backend's element-wise layers: add + RMSNorm, in-place RoPE, SiLU-and-mul, in C++.

Why: with the matmuls on oneDNN (linear.py) and decode attention in C++,
the torch versions of these small layers were the next cost of a step. Each
is a chain of torch ops that reads and writes a whole tensor per op (RMSNorm
with its residual add is seven), and every op allocates its output. The
loops in layer_ops.cpp do each layer in one pass (built with the
attention kernel, kernels.py).

Same contract as chapter 0's LayerOps, with the in-place RoPE of chapter 4's
TritonLayerOps: `rotary` turns q and k where they lie (the projections' fresh
outputs) and returns them. Anything the loops do not take (not float32, not
on the CPU, laid out otherwise, autograd on) goes to the torch versions.

Projections that pack_linears merged (linear.MergedLinears) run as one
matmul here: `project` returns q, k and v as slices of its output (RoPE
turns them there, rows apart by the merged width), and `swiglu` applies
SiLU-and-mul across the two halves of the merged gate/up output.
"""

from __future__ import annotations

import ctypes

import torch

from miniyaie.backends.cpu import kernels as cpu_kernels
from miniyaie.backends.cpu.linear import MergedLinears
from miniyaie.model.layers import LayerOps


SMALL_SWIGLU = 4096  # below this many elements torch's two ops beat a ctypes call (3 against 5 us at one row)


def _plain(*tensors: torch.Tensor) -> bool:
    """Contiguous float32 CPU tensors, and no gradient to record (the loops are invisible to autograd)."""
    return _no_autograd(*tensors) and all(_float32_cpu(t) and t.is_contiguous() for t in tensors)


def _no_autograd(*tensors: torch.Tensor) -> bool:
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _float32_cpu(t: torch.Tensor) -> bool:
    return t.dtype == torch.float32 and t.device.type == "cpu"


def _rows_of_heads(x: torch.Tensor) -> bool:
    """[rows, heads, head_dim] with each row's heads packed together; rows may lie further apart."""
    return x.dim() == 3 and x.stride(2) == 1 and x.stride(1) == x.shape[2] and x.stride(0) >= x.shape[1] * x.shape[2]


def _rotary_takes(q, k, cos, sin) -> bool:
    """What the in-place loop turns: float32 heads laid out row by row, one cos/sin row per token."""
    return (_plain(cos, sin) and _no_autograd(q, k) and _float32_cpu(q) and _float32_cpu(k)
            and _rows_of_heads(q) and _rows_of_heads(k) and cos.shape == (q.shape[0], q.shape[2])
            and sin.shape == cos.shape and k.shape[0] == q.shape[0] and k.shape[2] == q.shape[2])


def _merged_group(projections: tuple) -> MergedLinears | None:
    group = getattr(projections[0], "merged", None)
    return group if isinstance(group, MergedLinears) and group.matches(projections) else None


class CpuLayerOps(LayerOps):
    """LayerOps on the C++ loops; `calls` counts the calls that ran there (proof they are on the hot path)."""

    def __init__(self, library: ctypes.CDLL | None = None):
        self.library = library if library is not None else cpu_kernels.load()
        self.calls = {"rms_norm": 0, "rotary": 0, "swiglu": 0, "project": 0}

    def project(self, x, *projections):
        group = _merged_group(projections)
        if group is None or not group.usable(x):
            return super().project(x, *projections)
        self.calls["project"] += 1
        return group(x)

    def rms_norm(self, x, weight, eps: float, residual=None):
        hidden = x.shape[-1]
        if self.library is None or not _plain(x, weight, *([] if residual is None else [residual])) \
                or weight.numel() != hidden or (residual is not None and residual.shape != x.shape):
            return super().rms_norm(x, weight, eps, residual)
        self.calls["rms_norm"] += 1
        out = torch.empty_like(x)
        summed = x if residual is None else torch.empty_like(x)
        self.library.add_rms_norm(x.data_ptr(), None if residual is None else residual.data_ptr(), weight.data_ptr(),
                                  eps, x.numel() // hidden, hidden, summed.data_ptr(), out.data_ptr(),
                                  torch.get_num_threads())
        return out, summed

    def rotary(self, q, k, cos, sin):
        if self.library is None or not _rotary_takes(q, k, cos, sin):
            return super().rotary(q, k, cos, sin)
        self.calls["rotary"] += 1
        threads = torch.get_num_threads()
        for x in (q, k):
            self.library.rotary_in_place(x.data_ptr(), cos.data_ptr(), sin.data_ptr(), x.shape[0], x.shape[1],
                                         x.shape[2], x.stride(0), threads)
        return q, k

    def swiglu(self, x, gate_proj, up_proj, down_proj):
        group = _merged_group((gate_proj, up_proj))
        if group is not None and group.usable(x) and group.sizes[0] == group.sizes[1]:  # SwiGLU's gate and up match
            return down_proj(self._silu_mul_halves(group.stacked(x)))
        gate, up = gate_proj(x), up_proj(x)
        if self.library is None or not _plain(gate, up) or gate.shape != up.shape or gate.numel() < SMALL_SWIGLU:
            return down_proj(torch.nn.functional.silu(gate) * up)
        self.calls["swiglu"] += 1
        self.library.silu_mul_in_place(gate.data_ptr(), up.data_ptr(), gate.numel(), torch.get_num_threads())
        return down_proj(gate)

    def _silu_mul_halves(self, gate_up: torch.Tensor) -> torch.Tensor:
        """silu(first half) * second half of each row of a merged gate/up output."""
        width = gate_up.shape[-1] // 2
        if self.library is None or not _plain(gate_up) or gate_up.numel() < 2 * SMALL_SWIGLU:
            return torch.nn.functional.silu(gate_up[..., :width]) * gate_up[..., width:]
        self.calls["swiglu"] += 1
        out = gate_up.new_empty(*gate_up.shape[:-1], width)
        self.library.silu_mul_rows(gate_up.data_ptr(), gate_up.numel() // (2 * width), width, out.data_ptr(),
                                   torch.get_num_threads())
        return out
