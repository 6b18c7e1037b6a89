"""SiLU-and-mul, the middle of a SwiGLU MLP: silu(gate) * up in one pass over both inputs."""

from __future__ import annotations

import torch

from miniyaie.kernels._triton import tl, triton


def silu_and_mul_reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


# ANCHOR: silu_kernel
@triton.jit
def _silu_and_mul_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """One program = BLOCK consecutive elements of the flattened tensors.

    Writes elements [0, n) of out: silu_and_mul_reference(gate, up), within the
    chapter's tolerance for out's dtype (kernel_cases.assert_close) in fp32,
    fp16 and bf16. Nothing at or past n is read or written.
    """
    # Nudge: an elementwise kernel: load, compute in float32, round where torch rounds, store.
    # Hint 1: Each program owns BLOCK elements; the last block is partial, so loads and stores
    #   are masked. torch computes silu(gate) as its own op, so in bf16 its result is rounded
    #   before the multiply: round it too, or the output differs by an ulp.
    # Hint 2: This program's offsets are BLOCK consecutive ones from program_id * BLOCK (in int64:
    #   a large tensor passes 2**31 elements), valid below n. Load gate and up (masked) as float32; silu = g / (1 + exp(-g)), rounded to the
    #   output dtype and back to float32; store silu * up in the output dtype (masked).
    # Hint 3:
    #   offsets = program_id(0).to(int64) * BLOCK + arange(0, BLOCK); ok = offsets < n
    #   g = load(gate_ptr + offsets, mask=ok).to(float32); u = likewise from up_ptr
    #   silu = (g / (1 + exp(-g))).to(out dtype).to(float32)
    #   store(out_ptr + offsets, (silu * u).to(out dtype), mask=ok)
    # BEGIN SOLUTION 4.2: The layer's elementwise kernels
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offsets < n
    g = tl.load(gate_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
    silu = (g / (1.0 + tl.exp(-g))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + offsets, (silu * u).to(out_ptr.dtype.element_ty), mask=ok)
    # END SOLUTION
# ANCHOR_END: silu_kernel


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Triton version of silu_and_mul_reference (same shapes, contiguous)."""
    if gate.shape != up.shape:
        raise ValueError(f"gate {tuple(gate.shape)} and up {tuple(up.shape)} differ")
    gate, up = gate.contiguous(), up.contiguous()
    out = torch.empty_like(gate)
    n = gate.numel()
    block = 1024
    if n:
        _silu_and_mul_kernel[(triton.cdiv(n, block),)](gate, up, out, n, BLOCK=block)
    return out
