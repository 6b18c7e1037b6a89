"""Paged decode attention: one new query per sequence, K/V read through the block table.

Decode is memory-bound: every step reads each sequence's whole K/V once and
does little arithmetic with it. So the kernel (1) reads K/V straight out of
the paged pool (no gather copy), (2) loads each K/V tile once for all the
query heads that share it (GQA), and (3) splits long contexts across several
programs (flash-decoding) so that a small batch still fills the GPU; a
second tiny kernel merges the splits with their log-sum-exp.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from miniyaie.kernels._triton import dot_dtype, tl, triton


# ANCHOR: decode_reference
def decode_attention_reference(
    q: torch.Tensor,  # [num_seqs, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_slots, num_kv_heads, head_dim]
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int
    seq_lens: torch.Tensor,  # [num_seqs] int, each >= 1
    block_size: int,
    scale: float,
    num_splits: int | None = None,  # ignored: the reference does not split
    max_seq_len: int | None = None,  # ignored: the reference reads each length
) -> torch.Tensor:
    """Plain torch: gather each sequence's K/V slots, then softmax(q k^T * scale) v in float32."""
    num_seqs, num_heads, _ = q.shape
    group = num_heads // k_cache.shape[1]
    out = torch.empty_like(q)
    for seq in range(num_seqs):
        length = int(seq_lens[seq])
        positions = torch.arange(length, device=q.device)
        slots = block_tables[seq, positions // block_size] * block_size + positions % block_size
        k = k_cache[slots].float().repeat_interleave(group, dim=1)  # [length, num_heads, head_dim]
        v = v_cache[slots].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,khd->hk", q[seq].float(), k) * scale
        out[seq] = torch.einsum("hk,khd->hd", scores.softmax(dim=-1), v).to(q.dtype)
    return out
# ANCHOR_END: decode_reference


# ANCHOR: decode_kernel
@triton.jit
def _decode_split_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, part_out_ptr, part_lse_ptr,
    stride_qs, stride_qh, stride_cs, stride_ch, stride_bt,
    scale, split_len, block_size, num_heads, num_splits,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr, DOT: tl.constexpr,
):
    """One program = one sequence x one KV head x one split of its context.

    It attends the GROUP query heads of that KV head to tokens
    [split * split_len, (split + 1) * split_len) and writes the normalised
    partial output plus its log-sum-exp (-inf for an empty split).

    To write, for each of the GROUP query heads: its normalised partial output,
    softmax(q k^T * scale) v over this split's tokens only, and its lse, the log
    of the split's sum of exp(scores) (natural log, scores scaled), at the
    [seq, head, split] row of DecodePartials' `out` (DIM_PAD float32 columns;
    those past HEAD_DIM are padding) and `lse`. A split past the end of the
    sequence is empty: out 0, lse -inf, and no NaN anywhere. Tokens are read
    through the block table, never at or past seq_len; nothing is stored for the
    padding heads past GROUP (another program owns those rows).
    """
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    # Idea: the split's keys arrive a tile at a time; what must each query head carry from tile to tile?
    # Stuck? `miniyaie hint 4.1` prints hints, one level at a time.
    # TODO(Task 4.1): Attention over the paged cache. Replace this line with your code.
    raise NotImplementedError('Chapter 4, Task 1: Attention over the paged cache — see book/src/ch04_triton_kernels.md')
# ANCHOR_END: decode_kernel


# ANCHOR: merge_kernel
@triton.jit
def _merge_splits_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, stride_os, stride_oh, num_splits,
    HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr, SPLITS_PAD: tl.constexpr,
):
    """One program = one (sequence, query head): combine its splits' partial softmaxes.

    Reads the num_splits [seq, head, split] rows of the partials (DecodePartials'
    layout: DIM_PAD float32 columns per output row, and each split's lse, -inf
    for an empty split) and writes out[seq, head, :HEAD_DIM], in out's dtype: the
    attention over all the sequence's tokens, as decode_attention_reference gives
    it. It must stay finite and exact when the splits' lse lie far apart (scores
    near +100 and -100) and whatever splits are empty (at least one never is).
    """
    seq = tl.program_id(0)
    head = tl.program_id(1)
    num_heads = tl.num_programs(1)
    # Idea: how much should a split's normalised output count, and what does its lse know about that?
    # Stuck? `miniyaie hint 4.1` prints hints, one level at a time.
    # TODO(Task 4.1): Attention over the paged cache. Replace this line with your code.
    raise NotImplementedError('Chapter 4, Task 1: Attention over the paged cache — see book/src/ch04_triton_kernels.md')
# ANCHOR_END: merge_kernel


def decode_block_n(device: torch.device) -> int:
    """Tokens per K/V tile: small in the CPU interpreter, a GPU-sized tile otherwise."""
    return 16 if device.type == "cpu" else 64


def default_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, block_n: int) -> int:
    """Enough splits for ~2 programs per GPU core-ish (132 SMs) without tiles shorter than 4 x block_n."""
    wanted = triton.cdiv(264, num_seqs * num_kv_heads)
    return max(1, min(wanted, triton.cdiv(max_seq_len, 4 * block_n), 64))


# ANCHOR: decode_launch
class DecodePartials(NamedTuple):
    """What the split kernel writes: every split's normalised partial output and its log-sum-exp."""

    out: torch.Tensor  # [num_seqs, num_heads, num_splits, next_power_of_2(head_dim)] float32; columns past head_dim are padding
    lse: torch.Tensor  # [num_seqs, num_heads, num_splits] float32: log(sum(exp(scores))) of the split, -inf if it is empty
    split_len: int  # split i covers tokens [i * split_len, (i + 1) * split_len) of each sequence


def decode_partials(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    scale: float,
    num_splits: int | None = None,
    max_seq_len: int | None = None,
) -> DecodePartials:
    """Run the split kernel alone (the split kernel); decode_attention merges what it returns.

    `max_seq_len` (the longest context) sizes the splits. Give it when it is on the
    host already, as the backend does once per step: reading it from `seq_lens` on a
    GPU waits for the device, in every layer.
    """
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads cannot share {num_kv_heads} KV heads evenly")
    if k_cache.stride(2) != 1 or q.stride(2) != 1:
        raise ValueError("decode_attention needs the head dimension contiguous")
    group = num_heads // num_kv_heads
    block_n = decode_block_n(q.device)
    if max_seq_len is None:
        max_seq_len = int(seq_lens.max())  # a device sync on a GPU
    num_splits = num_splits or default_num_splits(num_seqs, num_kv_heads, max_seq_len, block_n)
    split_len = triton.cdiv(triton.cdiv(max_seq_len, num_splits), block_n) * block_n
    dim_pad = triton.next_power_of_2(head_dim)
    part_out = torch.empty(num_seqs, num_heads, num_splits, dim_pad, dtype=torch.float32, device=q.device)
    part_lse = torch.empty(num_seqs, num_heads, num_splits, dtype=torch.float32, device=q.device)
    seq_lens = seq_lens.to(device=q.device, dtype=torch.int32)
    _decode_split_kernel[(num_seqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens, part_out, part_lse,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), block_tables.stride(0),
        scale, split_len, block_size, num_heads, num_splits,
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim, DIM_PAD=dim_pad,
        BLOCK_N=block_n, DOT=dot_dtype(q.dtype),
    )
    return DecodePartials(part_out, part_lse, split_len)


def merge_splits(part_out: torch.Tensor, part_lse: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Run the merge kernel alone (the merge kernel): combine DecodePartials' out and lse into out [num_seqs, num_heads, head_dim]."""
    num_seqs, num_heads, num_splits, dim_pad = part_out.shape
    if not (part_out.is_contiguous() and part_lse.is_contiguous()) or part_lse.shape != part_out.shape[:3]:
        raise ValueError("merge_splits needs contiguous partials shaped as decode_partials returns them")
    _merge_splits_kernel[(num_seqs, num_heads)](
        part_out, part_lse, out, out.stride(0), out.stride(1), num_splits,
        HEAD_DIM=out.shape[2], DIM_PAD=dim_pad, SPLITS_PAD=triton.next_power_of_2(num_splits),
    )
    return out


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    scale: float,
    num_splits: int | None = None,
    max_seq_len: int | None = None,
) -> torch.Tensor:
    """Triton paged decode attention; same arguments and result as decode_attention_reference
    (`max_seq_len`: see decode_partials)."""
    out = torch.empty_like(q)
    if q.shape[0] == 0:
        return out
    partials = decode_partials(q, k_cache, v_cache, block_tables, seq_lens, block_size, scale, num_splits, max_seq_len)
    if partials.out.shape[2] == 1:  # one split is already normalised: nothing to merge (and the split kernel can be tested without the merge)
        out.copy_(partials.out[:, :, 0, : q.shape[2]])
        return out
    return merge_splits(partials.out, partials.lse, out)
# ANCHOR_END: decode_launch
