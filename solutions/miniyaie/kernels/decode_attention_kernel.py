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
    # Nudge: the split's keys arrive a tile at a time; what must each query head carry from tile to tile?
    # Hint 1: This program owns the tokens [split * split_len, (split + 1) * split_len) of its
    #   sequence, cut at seq_len (a split past the end is empty). Its KV head serves GROUP
    #   consecutive query heads (GQA): load all of their queries as one [GROUP_PAD, DIM_PAD]
    #   tile, so each K/V tile is read once for the whole group. Fold `scale` into q once.
    #   The split's keys do not fit in registers at once, so visit them tile by tile and
    #   keep, per query head, a running max, a running sum of exponentials and a running
    #   weighted sum of V, rescaling the old sums whenever the max grows (flash attention's
    #   invariant: acc / l is the softmax-weighted V of the tokens seen so far). Token t lives
    #   in page block_tables[seq, t // block_size] at offset t % block_size. Every load and
    #   store is masked: a token at or past `end`, a padded dim or head. An empty split must
    #   end with l = 0 and produce 0 and -inf, not 0/0.
    # Hint 2: start = split * split_len, end = min(start + split_len, seq_len). The group's heads
    #   are kv_head * GROUP + arange(GROUP_PAD), valid below GROUP; dims arange(DIM_PAD), valid
    #   below HEAD_DIM. Load q at seq * stride_qs + head * stride_qh + dim (masked), scale it
    #   in float32 and cast to DOT. Start m at -inf, l at 0, acc at 0 (float32). For each tile
    #   of BLOCK_N tokens from start to end: the token indexes and their validity, the pages,
    #   the slots (page * block_size + offset, in int64), K and V rows at slot * stride_cs +
    #   kv_head * stride_ch, scores = q k^T (in DOT), -inf where a token is invalid; new max,
    #   correction exp(m - m_new), p = exp(scores - m_new), update l and acc with the
    #   correction, move m. After the loop out = acc / l and lse = m + log(l), guarding l = 0.
    #   Store both at the rows of DecodePartials' [seq, head, split] layout, valid heads only.
    # Hint 3:
    #   seq_len = load(seq_lens + seq); start = split * split_len; end = minimum(start + split_len, seq_len)
    #   heads = kv_head * GROUP + arange(GROUP_PAD); head_ok = arange(GROUP_PAD) < GROUP; dims, dim_ok likewise
    #   q = load(q + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :], mask=head_ok & dim_ok); q = (q.f32 * scale).to(DOT)
    #   m = -inf[GROUP_PAD]; l = 0[GROUP_PAD]; acc = 0[GROUP_PAD, DIM_PAD]
    #   for tile in range(start, end, BLOCK_N):
    #       tokens = tile + arange(BLOCK_N); ok = tokens < end
    #       pages = load(block_tables + seq*stride_bt + tokens // block_size, mask=ok)
    #       offs = (pages.int64 * block_size + tokens % block_size)[:, None] * stride_cs + kv_head * stride_ch + dims[None, :]
    #       k, v = masked loads (ok & dim_ok) as float32
    #       scores = where(ok, dot(q, trans(k.to(DOT))), -inf); m_new = max(m, rowmax(scores))
    #       c = exp(m - m_new); p = exp(scores - m_new[:, None]); l = l*c + rowsum(p); acc = acc*c[:, None] + dot(p, v); m = m_new
    #   out = acc / where(l > 0, l, 1); lse = where(l > 0, m + log(l), -inf)
    #   rows = (seq * num_heads + heads) * num_splits + split
    #   store(part_out + rows[:, None] * DIM_PAD + dims[None, :], out, mask=head_ok[:, None]); store(part_lse + rows, lse, mask=head_ok)
    # BEGIN SOLUTION 4.1: Attention over the paged cache
    seq_len = tl.load(seq_lens_ptr + seq)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    heads = kv_head * GROUP + tl.arange(0, GROUP_PAD)  # the query heads sharing this K/V
    head_ok = tl.arange(0, GROUP_PAD) < GROUP
    dims = tl.arange(0, DIM_PAD)
    dim_ok = dims < HEAD_DIM
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :],
                mask=head_ok[:, None] & dim_ok[None, :], other=0.0)
    q = (q.to(tl.float32) * scale).to(DOT)

    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM_PAD], tl.float32)
    for tile in range(start, end, BLOCK_N):
        tokens = tile + tl.arange(0, BLOCK_N)
        token_ok = tokens < end
        pages = tl.load(block_tables_ptr + seq * stride_bt + tokens // block_size, mask=token_ok, other=0)
        slots = pages.to(tl.int64) * block_size + tokens % block_size
        kv_offsets = slots[:, None] * stride_cs + kv_head * stride_ch + dims[None, :]
        kv_mask = token_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_cache_ptr + kv_offsets, mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + kv_offsets, mask=kv_mask, other=0.0).to(tl.float32)
        scores = tl.dot(q, tl.trans(k.to(DOT)))  # [GROUP_PAD, BLOCK_N]
        scores = tl.where(token_ok[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        correction = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        l = l * correction + tl.sum(p, axis=1)
        acc = acc * correction[:, None] + tl.dot(p.to(DOT), v.to(DOT))
        m = m_new
    nonempty = l > 0
    out = acc / tl.where(nonempty, l, 1.0)[:, None]
    lse = tl.where(nonempty, m + tl.log(tl.where(nonempty, l, 1.0)), float("-inf"))
    rows = (seq * num_heads + heads) * num_splits + split  # partial results: [seq, head, split]
    tl.store(part_out_ptr + rows[:, None] * DIM_PAD + dims[None, :], out, mask=head_ok[:, None])
    tl.store(part_lse_ptr + rows, lse, mask=head_ok)
    # END SOLUTION
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
    # Nudge: how much should a split's normalised output count, and what does its lse know about that?
    # Hint 1: Two partial softmaxes combine exactly when each is weighted by its total mass
    #   exp(lse_i). Subtract the largest lse before exponentiating, or a long split overflows
    #   float32; an empty split (lse -inf) then weighs exactly 0. Padding rows past num_splits
    #   must weigh 0 as well, and at least one split of a sequence is never empty. This
    #   program's splits are the rows (seq * num_heads + head) * num_splits + 0 .. num_splits - 1
    #   of the partials (DecodePartials' [seq, head, split] layout).
    # Hint 2: Load every split's lse (masked, -inf past num_splits) and its partial output row
    #   (masked, 0 past num_splits). Weights = exp(lse - max lse). The result is the sum of
    #   weights times outputs over the splits, divided by the sum of the weights. Store its
    #   first HEAD_DIM columns at out[seq, head], in out's dtype.
    # Hint 3:
    #   splits = arange(SPLITS_PAD); dims = arange(DIM_PAD); rows = (seq * num_heads + head) * num_splits + splits
    #   lse = load(part_lse + rows, mask=splits < num_splits, other=-inf)
    #   w = exp(lse - max(lse)); parts = load(part_out + rows[:, None] * DIM_PAD + dims[None, :], mask=..., other=0)
    #   out = sum(parts * w[:, None], axis=0) / sum(w); store(out + seq * stride_os + head * stride_oh + dims, out, mask=dims < HEAD_DIM)
    # BEGIN SOLUTION 4.1: Attention over the paged cache
    splits = tl.arange(0, SPLITS_PAD)
    dims = tl.arange(0, DIM_PAD)
    rows = (seq * num_heads + head) * num_splits + splits
    lse = tl.load(part_lse_ptr + rows, mask=splits < num_splits, other=float("-inf"))
    weights = tl.exp(lse - tl.max(lse, axis=0))
    parts = tl.load(part_out_ptr + rows[:, None] * DIM_PAD + dims[None, :], mask=(splits < num_splits)[:, None], other=0.0)
    out = tl.sum(parts * weights[:, None], axis=0) / tl.sum(weights, axis=0)
    tl.store(out_ptr + seq * stride_os + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty), mask=dims < HEAD_DIM)
    # END SOLUTION
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
