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
    # Idea: an elementwise kernel: load, compute in float32, round where torch rounds, store.
    # Stuck? `miniyaie hint 4.2` prints hints, one level at a time.
    # TODO(Task 4.2): The layer's elementwise kernels. Replace this line with your code.
    raise NotImplementedError("Chapter 4, Task 2: The layer's elementwise kernels — see book/src/ch04_triton_kernels.md")
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
