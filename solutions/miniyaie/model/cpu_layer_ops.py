"""The cpu backend's element-wise layers: add + RMSNorm, in-place RoPE, SiLU-and-mul, in C++.

Why: with the matmuls on oneDNN (cpu_linear.py) and decode attention in C++,
the torch versions of these small layers were the next cost of a step. Each
is a chain of torch ops that reads and writes a whole tensor per op (RMSNorm
with its residual add is seven), and every op allocates its output. The
loops in cpu_layer_ops.cpp do each layer in one pass (built with the
attention kernel, cpu_kernels.py).

Same contract as chapter 0's LayerOps, with the in-place RoPE of chapter 4's
TritonLayerOps: `rotary` turns q and k where they lie (the projections' fresh
outputs) and returns them. Anything the loops do not take (not float32, not
on the CPU, not contiguous, autograd on) goes to the torch versions.
"""

from __future__ import annotations

import ctypes

import torch

from miniyaie.model import cpu_kernels
from miniyaie.model.layers import LayerOps


SMALL_SWIGLU = 4096  # below this many elements torch's two ops beat a ctypes call (3 against 5 us at one row)


def _plain(*tensors: torch.Tensor) -> bool:
    """Contiguous float32 CPU tensors, and no gradient to record (the loops are invisible to autograd)."""
    recording = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    return not recording and all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


class CpuLayerOps(LayerOps):
    """LayerOps on the C++ loops; `calls` counts the calls that ran there (proof they are on the hot path)."""

    def __init__(self, library: ctypes.CDLL | None = None):
        self.library = library if library is not None else cpu_kernels.load()
        self.calls = {"rms_norm": 0, "rotary": 0, "swiglu": 0}

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
        if self.library is None or not _plain(q, k, cos, sin) or q.dim() != 3 or k.dim() != 3 \
                or cos.shape != (q.shape[0], q.shape[2]) or sin.shape != cos.shape or k.shape[2] != q.shape[2]:
            return super().rotary(q, k, cos, sin)
        self.calls["rotary"] += 1
        threads = torch.get_num_threads()
        for x in (q, k):
            self.library.rotary_in_place(x.data_ptr(), cos.data_ptr(), sin.data_ptr(), x.shape[0], x.shape[1],
                                         x.shape[2], threads)
        return q, k

    def swiglu(self, x, gate_proj, up_proj, down_proj):
        gate, up = gate_proj(x), up_proj(x)
        if self.library is None or not _plain(gate, up) or gate.shape != up.shape or gate.numel() < SMALL_SWIGLU:
            return down_proj(torch.nn.functional.silu(gate) * up)
        self.calls["swiglu"] += 1
        self.library.silu_mul_in_place(gate.data_ptr(), up.data_ptr(), gate.numel(), torch.get_num_threads())
        return down_proj(gate)
