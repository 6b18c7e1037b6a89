"""The quantized linear as a Triton kernel: activations times weight blocks, dequantized in registers (Task 10.3).

On a GPU a decode step is bound by the bytes of the weights it reads, as on a CPU. A kernel that first
wrote the float weights to memory would read and write more than the float model does; this one reads
each block's codes, scale and minimum once per tile of rows and never forms the float weight outside
registers. Marlin, AWQ's and GPTQ's kernels in vLLM and SGLang do this with far more care for the
tensor cores' layouts; the structure is the same. Without a GPU it runs in Triton's interpreter.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from miniyaie.kernels._triton import dot_dtype, tl, triton
from miniyaie.quant.blocks import QuantizedWeight

BLOCK_M, BLOCK_N = 16, 32  # rows of x and output features per program (tl.dot needs 16 or more on a GPU)


# ANCHOR: quant_matmul_kernel
@triton.jit
def _quant_matmul_kernel(
    x_ptr, codes_ptr, scales_ptr, mins_ptr, out_ptr, stride_x, stride_codes, stride_scales, stride_out,
    K: tl.constexpr, GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT: tl.constexpr,
):
    """One program = out[BLOCK_M rows, BLOCK_N features] = x[rows, :K] @ W[features, :K]^T, W in blocks.

    The layout is QuantizedWeight's: row n of `codes` holds its K codes (BITS 4: K / 2 bytes in
    pack_nibbles's layout, group by group; BITS 8: K signed bytes), `scales` and `mins` (BITS 4 only)
    hold one float16 per block of GROUP weights, at [n, k // GROUP] (GROUP a power of two, 32 or more). The launcher pads x and out to whole
    tiles and passes K as a multiple of GROUP, so every address a tile reads or writes exists: no masks.
    Products are formed in DOT (float32, or the activations' type on a GPU) and summed in float32: the
    result is x @ W.dequantize()^T up to the order of the additions, within float32's rounding (on a GPU,
    in bfloat16, within tl.dot's).
    """
    # Idea: walk K one block at a time; what can be summed before the block's scale is applied?
    # Stuck? `miniyaie hint 10.3` prints hints, one level at a time.
    # TODO(Task 10.3): The quantized linear kernel. Replace this line with your code.
    raise NotImplementedError('Chapter 10, Task 3: The quantized linear kernel — see book/src/ch10_quantization.md')
# ANCHOR_END: quant_matmul_kernel


def _padded(t: torch.Tensor, rows: int) -> torch.Tensor:
    """t with zero rows appended up to `rows` (a whole number of tiles), contiguous."""
    return F.pad(t, (0, 0, 0, rows - t.shape[0])).contiguous() if rows > t.shape[0] else t.contiguous()


def quant_matmul(x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    """x [..., K] @ weight^T with the Triton kernel: [..., N] in x's dtype (float32, float16 or bfloat16)."""
    n, k = weight.shape
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features; the weight takes {k}")
    rows, group, scales = x.reshape(-1, k), weight.group, weight.scales
    if weight.bits == 8 and group & (group - 1):  # per channel (group K): the same weight in blocks of 32
        if group % 32:
            raise ValueError(f"8-bit blocks of {group} weights: the kernel needs a multiple of 32")
        scales, group = scales.repeat_interleave(group // 32, dim=1), 32
    if group & (group - 1) or group < 32:
        raise ValueError(f"blocks of {group} weights: the kernel reads blocks of a power of two from 32 up")
    m_tiles, n_tiles = triton.cdiv(rows.shape[0], BLOCK_M), triton.cdiv(n, BLOCK_N)
    x_pad = _padded(rows, m_tiles * BLOCK_M)
    codes, scales = _padded(weight.codes, n_tiles * BLOCK_N), _padded(scales, n_tiles * BLOCK_N)
    mins = scales if weight.mins is None else _padded(weight.mins, n_tiles * BLOCK_N)  # read only when BITS 4
    out = torch.empty(m_tiles * BLOCK_M, n_tiles * BLOCK_N, dtype=x.dtype, device=x.device)
    _quant_matmul_kernel[(m_tiles, n_tiles)](
        x_pad, codes, scales, mins, out, x_pad.stride(0), codes.stride(0), scales.stride(0), out.stride(0),
        K=k, GROUP=group, BITS=weight.bits, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, DOT=dot_dtype(x.dtype),
    )
    return out[: rows.shape[0], :n].reshape(*x.shape[:-1], n)
