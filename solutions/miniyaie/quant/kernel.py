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
    # Nudge: walk K one block at a time; what can be summed before the block's scale is applied?
    # Hint 1: A block's weights are d * q + m, so its share of a dot product with x is
    #   d * (sum of q * x) + m * (sum of x): the codes are multiplied as small integers (exact in
    #   any float type), the scale applied once per block to their sum, and the minimum needs only
    #   the sum of the block's x. Apply d and m in float32 and keep the running sum in float32:
    #   summed in bfloat16 the result loses its low digits after a few dozen blocks. For 4-bit codes,
    #   the low nibbles of a block's bytes are its first half of weights and the high nibbles its
    #   second: multiply each half of x by its half of the codes rather than unpacking in place.
    # Hint 2: Offsets: rows = pid_m * BLOCK_M + arange, features = pid_n * BLOCK_N + arange. Start a
    #   float32 accumulator [BLOCK_M, BLOCK_N]. For each block b in range(K // GROUP): load d (and m)
    #   of every feature [BLOCK_N] as float32. BITS 8: load the block's x [BLOCK_M, GROUP] and codes
    #   [BLOCK_N, GROUP], dot(x, codes^T) times d. BITS 4: load x's two halves [BLOCK_M, GROUP / 2] and
    #   the block's bytes [BLOCK_N, GROUP / 2]; low = bytes & 15, high = bytes >> 4; dot(x_first, low^T)
    #   + dot(x_second, high^T), times d, plus (sum of x over the block)[:, None] * m[None, :]. Cast
    #   the dot's inputs to DOT and pass out_dtype float32. Store the accumulator in out's type.
    # Hint 3:
    #   rows, feats = pid_m * BLOCK_M + arange(BLOCK_M), pid_n * BLOCK_N + arange(BLOCK_N); acc = zeros float32
    #   for b in range(K // GROUP):
    #       d = load(scales_ptr + feats * stride_scales + b).to(float32)
    #       if BITS == 8:
    #           j = arange(GROUP); xb = load(x rows, columns b * GROUP + j); q = load(codes feats, b * GROUP + j)
    #           acc += dot(xb.to(DOT), trans(q).to(DOT), out_dtype=float32) * d[None, :]
    #       else:
    #           j = arange(GROUP // 2); lo = load(x, b * GROUP + j); hi = load(x, b * GROUP + GROUP // 2 + j)
    #           bytes = load(codes feats, b * GROUP // 2 + j); m = load(mins ...).to(float32)
    #           s = dot(lo, trans(bytes & 15)) + dot(hi, trans(bytes >> 4))   # inputs .to(DOT), out float32
    #           acc += s * d[None, :] + (sum(lo, 1) + sum(hi, 1))[:, None] * m[None, :]
    #   store(out rows x feats, acc.to(out type))
    # BEGIN SOLUTION 10.3: The quantized linear kernel
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    features = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for block in range(K // GROUP):
        d = tl.load(scales_ptr + features * stride_scales + block).to(tl.float32)
        if BITS == 8:
            j = tl.arange(0, GROUP)
            x = tl.load(x_ptr + rows[:, None] * stride_x + block * GROUP + j[None, :])
            q = tl.load(codes_ptr + features[:, None] * stride_codes + block * GROUP + j[None, :])
            acc += tl.dot(x.to(DOT), tl.trans(q.to(DOT)), out_dtype=tl.float32) * d[None, :]
        else:
            j = tl.arange(0, GROUP // 2)
            x_first = tl.load(x_ptr + rows[:, None] * stride_x + block * GROUP + j[None, :])
            x_second = tl.load(x_ptr + rows[:, None] * stride_x + block * GROUP + GROUP // 2 + j[None, :])
            packed = tl.load(codes_ptr + features[:, None] * stride_codes + block * (GROUP // 2) + j[None, :])
            m = tl.load(mins_ptr + features * stride_scales + block).to(tl.float32)
            sums = tl.dot(x_first.to(DOT), tl.trans((packed & 15).to(DOT)), out_dtype=tl.float32)
            sums += tl.dot(x_second.to(DOT), tl.trans((packed >> 4).to(DOT)), out_dtype=tl.float32)
            x_sum = tl.sum(x_first.to(tl.float32), axis=1) + tl.sum(x_second.to(tl.float32), axis=1)
            acc += sums * d[None, :] + x_sum[:, None] * m[None, :]
    tl.store(out_ptr + rows[:, None] * stride_out + features[None, :], acc.to(out_ptr.dtype.element_ty))
    # END SOLUTION
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
