"""The batched LoRA multiply as one Triton kernel over segments, in the style of Punica's SGMV (Task 11.4).

On a GPU a Python loop over segments costs a launch per adapter per projection per layer: with
eight adapters, 30 layers and 7 projections, thousands of launches a step. One launch covers them
all: program (j, m, n) takes a tile of BLOCK_M rows of segment j (gathered through the segments'
row order), shrinks them by the segment's A to the rank (kept in registers), expands by a tile of
BLOCK_N columns of B and adds the result to those rows of y. Punica's SGMV and vLLM's punica
kernels split the shrink and the expand into two launches so that the rank-wide intermediate is
computed once per row rather than once per column tile; with small ranks the recomputation here is
cheap, and one kernel is easier to read. Without a GPU it runs in Triton's interpreter.
"""

from __future__ import annotations

import torch

from miniyaie.kernels._triton import dot_dtype, tl, triton
from miniyaie.lora.batched import Segments

BLOCK_M, BLOCK_N, BLOCK_K = 16, 32, 32  # rows, output columns and input features per tile (tl.dot: 16 or more)


# ANCHOR: sgmv_kernel
@triton.jit
def _sgmv_kernel(
    x_ptr, y_ptr, a_ptr, b_ptr, scaling_ptr, order_ptr, starts_ptr, lengths_ptr, slots_ptr,
    stride_x, stride_y, stride_a_slot, stride_a_rank, stride_a_in, stride_b_slot, stride_b_out, stride_b_rank,
    K, N, RANK,
    R: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
):
    """One launch adds every segment's LoRA delta to y, in place (the batched multiply of add_lora).

    For each segment j, of slot s = slots[j], and each of its rows i = order[starts[j] + t] (t <
    lengths[j]): y[i, :N] += scaling[s] * (x[i, :K] @ A[s]^T) @ B[s]^T. Grid: (segments, row tiles
    of the longest segment, column tiles of N); program (j, m, n) writes segment j's rows t in
    m * BLOCK_M .. (m + 1) * BLOCK_M - 1 and columns n * BLOCK_N .. (n + 1) * BLOCK_N - 1, those that
    exist; no two programs write the same element. Operands: x [rows, K] and y [rows, N] with unit
    column stride; A[s] [RANK, K] at a_ptr + s * stride_a_slot and B[s] [N, RANK] at b_ptr + s *
    stride_b_slot, of any strides (all given); scaling [slots]. R is RANK rounded up to a power of
    two, 16 or more. Nothing outside a program's rows, N, K or RANK is read or written (an unmasked
    access can crash the interpreter). Products in DOT, sums in float32, y stored in its own type.
    """
    # Nudge: draw the grid for two segments of 3 and 20 rows: what does each program read and write?
    # Hint 1: A program's rows are not consecutive: they are entries of `order`, so the row index
    #   itself is loaded first, and row tiles past the segment's length are masked. The shrink is
    #   a small matmul [BLOCK_M, K] x [K, R] walked over K in BLOCK_K steps with a float32
    #   accumulator; masked A rows (rank >= RANK) load as zeros so the padding adds nothing. The
    #   expand multiplies that [BLOCK_M, R] by B's [R, BLOCK_N] tile; scale once, on the small one.
    # Hint 2: j, m, n = program ids; start, length, s = loads at j; i = m * BLOCK_M + arange;
    #   live = i < length; rows = load(order + start + i, mask=live). r = arange(R), cols = n *
    #   BLOCK_N + arange. acc = zeros [BLOCK_M, R]; for k0 in range(0, K, BLOCK_K): kk = k0 +
    #   arange(BLOCK_K); xt = load x[rows, kk] (mask live & kk < K); at = load A[s][r, kk] as
    #   [R, BLOCK_K] (mask r < RANK & kk < K); acc += dot(xt, trans(at)). acc *= scaling[s]. bt =
    #   load B[s][cols, r] [BLOCK_N, R] (mask cols < N & r < RANK); delta = dot(acc, trans(bt));
    #   y[rows, cols] += delta under live & cols < N.
    # Hint 3:
    #   start, length, s = load(starts_ptr + j), load(lengths_ptr + j), load(slots_ptr + j)
    #   i = m * BLOCK_M + arange(BLOCK_M); live = i < length; rows = load(order_ptr + start + i, mask=live)
    #   r = arange(R); cols = n * BLOCK_N + arange(BLOCK_N); acc = zeros((BLOCK_M, R), float32)
    #   for k0 in range(0, K, BLOCK_K):
    #       kk = k0 + arange(BLOCK_K)
    #       xt = load(x_ptr + rows[:, None] * stride_x + kk[None, :], mask=live[:, None] & (kk < K)[None, :], other=0)
    #       at = load(a_ptr + s * stride_a_slot + r[:, None] * stride_a_rank + kk[None, :] * stride_a_in, mask=..., other=0)
    #       acc += dot(xt.to(DOT), trans(at).to(DOT), out_dtype=float32)
    #   acc *= load(scaling_ptr + s)
    #   bt = load(b_ptr + s * stride_b_slot + cols[:, None] * stride_b_out + r[None, :] * stride_b_rank, mask=..., other=0)
    #   delta = dot(acc.to(DOT), trans(bt).to(DOT), out_dtype=float32)
    #   at y_ptr + rows[:, None] * stride_y + cols[None, :]: load, add delta, store (mask live & cols < N)
    # BEGIN SOLUTION 11.4: The segmented LoRA kernel
    j, m, n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start, length, slot = tl.load(starts_ptr + j), tl.load(lengths_ptr + j), tl.load(slots_ptr + j)
    i = m * BLOCK_M + tl.arange(0, BLOCK_M)
    live = i < length
    rows = tl.load(order_ptr + start + i, mask=live)  # a dead lane's row is never dereferenced: every use is masked
    r = tl.arange(0, R)
    cols = n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, R), dtype=tl.float32)
    a_base = a_ptr + slot * stride_a_slot
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        xt = tl.load(x_ptr + rows[:, None] * stride_x + kk[None, :], mask=live[:, None] & (kk < K)[None, :], other=0.0)
        at = tl.load(a_base + r[:, None] * stride_a_rank + kk[None, :] * stride_a_in,
                     mask=(r < RANK)[:, None] & (kk < K)[None, :], other=0.0)
        acc += tl.dot(xt.to(tl.float32).to(DOT), tl.trans(at.to(tl.float32)).to(DOT), out_dtype=tl.float32)
    acc = acc * tl.load(scaling_ptr + slot).to(tl.float32)
    bt = tl.load(b_ptr + slot * stride_b_slot + cols[:, None] * stride_b_out + r[None, :] * stride_b_rank,
                 mask=(cols < N)[:, None] & (r < RANK)[None, :], other=0.0)
    delta = tl.dot(acc.to(DOT), tl.trans(bt.to(tl.float32)).to(DOT), out_dtype=tl.float32)
    where = y_ptr + rows[:, None] * stride_y + cols[None, :]
    keep = live[:, None] & (cols < N)[None, :]
    old = tl.load(where, mask=keep, other=0.0).to(tl.float32)
    tl.store(where, (old + delta).to(y_ptr.dtype.element_ty), mask=keep)
    # END SOLUTION
# ANCHOR_END: sgmv_kernel


def sgmv(y: torch.Tensor, x: torch.Tensor, segments: Segments, a: torch.Tensor, b: torch.Tensor,
         scaling: torch.Tensor) -> torch.Tensor:
    """add_lora (batched.py) with the Triton kernel, one launch: y [rows, out] += the rows' deltas in place; returns y."""
    if x.dim() != 2 or y.dim() != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"x {tuple(x.shape)} and y {tuple(y.shape)} must be [rows, in] and [rows, out]")
    if a.shape[2] != x.shape[1] or b.shape[1] != y.shape[1] or a.shape[1] != b.shape[2]:
        raise ValueError(f"A {tuple(a.shape)} and B {tuple(b.shape)} do not fit x {tuple(x.shape)} and y {tuple(y.shape)}")
    if len(segments) == 0:
        return y
    if x.stride(1) != 1 or y.stride(1) != 1:
        raise ValueError("x and y need contiguous rows")
    rank = a.shape[1]
    longest = int(segments.lengths.max())
    grid = (len(segments), triton.cdiv(longest, BLOCK_M), triton.cdiv(y.shape[1], BLOCK_N))
    _sgmv_kernel[grid](
        x, y, a, b, scaling, segments.order, segments.starts, segments.lengths, segments.slots,
        x.stride(0), y.stride(0), a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2),
        x.shape[1], y.shape[1], rank,
        R=max(16, triton.next_power_of_2(rank)), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        DOT=dot_dtype(x.dtype),
    )
    return y
