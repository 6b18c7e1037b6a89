"""Extend (prefill) attention: the new tokens of many sequences in one launch.

Each sequence brings query_len new tokens after a cached prefix of
seq_len - query_len tokens. The kernel reads every key, prefix and new
tokens alike, from the paged pool through the block table; the softmax is
computed online, one key tile at a time (FlashAttention), so no
[queries x keys] matrix is ever written to memory.
"""

from __future__ import annotations

import torch

from miniyaie.kernels._triton import dot_dtype, tl, triton


# ANCHOR: extend_reference
def extend_attention_reference(
    q: torch.Tensor,  # [num_tokens, num_heads, head_dim]: every sequence's new tokens, packed
    k_cache: torch.Tensor,  # [num_slots, num_kv_heads, head_dim], new K/V already stored
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int
    query_start: torch.Tensor,  # [num_seqs + 1] int: sequence s owns rows query_start[s]..query_start[s+1]-1
    seq_lens: torch.Tensor,  # [num_seqs] int: prefix + new tokens
    block_size: int,
    scale: float,
) -> torch.Tensor:
    """Plain torch: gather each sequence's slots and run a causal attention offset by its prefix."""
    num_heads = q.shape[1]
    group = num_heads // k_cache.shape[1]
    out = torch.empty_like(q)
    for seq in range(len(seq_lens)):
        first, last, length = int(query_start[seq]), int(query_start[seq + 1]), int(seq_lens[seq])
        if last == first:
            continue
        positions = torch.arange(length, device=q.device)
        slots = block_tables[seq, positions // block_size] * block_size + positions % block_size
        k = k_cache[slots].float().repeat_interleave(group, dim=1)
        v = v_cache[slots].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[first:last].float(), k) * scale
        visible = torch.ones(last - first, length, dtype=torch.bool, device=q.device).tril(length - (last - first))
        probs = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
        out[first:last] = torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype)
    return out
# ANCHOR_END: extend_reference


# ANCHOR: extend_kernel
@triton.jit
def _extend_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, query_start_ptr, seq_lens_ptr, out_ptr,
    stride_qt, stride_qh, stride_cs, stride_ch, stride_bt, stride_ot, stride_oh,
    scale, block_size,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr,
):
    """One program = BLOCK_M new tokens of one sequence, one query head.

    The sequence's first prefix_len = seq_len - query_len keys are already in the
    cache (a cached prefix or earlier chunks); its query_len new tokens sit at
    positions prefix_len .. seq_len - 1 and their K/V are in the cache too.
    Each new token attends, as extend_attention_reference does, to every token
    of its sequence up to and including itself (read through the block table)
    and to no other. The sequence's new tokens are the rows
    query_start[seq] .. query_start[seq + 1] - 1 of q and of out; this program
    writes out's rows of its BLOCK_M tokens (query head `head`, the first HEAD_DIM
    columns) and nothing else. The grid has a tile_m for the longest sequence:
    a tile past this sequence's new tokens writes nothing.
    """
    seq = tl.program_id(0)
    head = tl.program_id(1)
    tile_m = tl.program_id(2)
    # Nudge: which keys may each query row see, and which key tiles can this whole query tile skip?
    # Hint 1: The sequence's new tokens are the q (and out) rows query_start[seq] ..
    #   query_start[seq + 1] - 1; this program takes BLOCK_M of them, from tile_m * BLOCK_M,
    #   and a tile past the sequence's new tokens has nothing to do (the grid is sized for
    #   the longest sequence). Query head `head` reads KV head head // GROUP. A query at
    #   position p sees keys 0..p: the whole cached prefix plus the new tokens up to itself.
    #   This tile's last query can see no further than prefix_len + (tile_m + 1) * BLOCK_M - 1
    #   (nor past seq_len), so key tiles beyond that are skipped entirely, which is what
    #   makes causal attention cost half. Each query row keeps its own running max, sum and
    #   output; key 0 is visible to every row, so no row ends with l = 0. Store only the
    #   rows that are this sequence's tokens and the dims below HEAD_DIM.
    # Hint 2: first = query_start[seq], query_len = query_start[seq + 1] - first; return when
    #   tile_m * BLOCK_M >= query_len. prefix_len = seq_len - query_len. rows = tile_m * BLOCK_M
    #   + arange(BLOCK_M), valid below query_len, at positions prefix_len + rows. Load q rows
    #   first + rows (masked), scale in float32, cast to DOT. m = -inf, l = 0, acc = 0 per row.
    #   The key range ends at min(seq_len, prefix_len + (tile_m + 1) * BLOCK_M). For each tile
    #   of BLOCK_N keys in it: slots through the block table (int64), masked K/V loads, scores
    #   = q k^T, keep a score only when the key is in range and key <= the row's query
    #   position, else -inf; the online-softmax update. Finally store acc / l at the out rows
    #   first + rows, cast to out's dtype, masked.
    # Hint 3:
    #   first = load(query_start + seq); query_len = load(query_start + seq + 1) - first; if tile_m * BLOCK_M >= query_len: return
    #   prefix_len = load(seq_lens + seq) - query_len; kv_head = head // GROUP
    #   rows = tile_m * BLOCK_M + arange(BLOCK_M); row_ok = rows < query_len; query_pos = prefix_len + rows
    #   q = load(q + (first + rows)[:, None] * stride_qt + head * stride_qh + dims[None, :], mask=row_ok & dim_ok); scale, to(DOT)
    #   m, l, acc = -inf[BLOCK_M], 0[BLOCK_M], 0[BLOCK_M, DIM_PAD]; key_end = minimum(seq_len, prefix_len + (tile_m + 1) * BLOCK_M)
    #   for tile in range(0, key_end, BLOCK_N):
    #       keys = tile + arange(BLOCK_N); ok = keys < key_end; slots via block_tables; k, v masked loads
    #       scores = where(ok[None, :] & (keys[None, :] <= query_pos[:, None]), dot(q, trans(k)), -inf)
    #       online-softmax update of m, l, acc (as in the decode split kernel)
    #   store(out + (first + rows)[:, None] * stride_ot + head * stride_oh + dims[None, :], acc / l[:, None], mask=row_ok & dim_ok)
    # BEGIN SOLUTION 4.1: Attention over the paged cache
    first = tl.load(query_start_ptr + seq)
    query_len = tl.load(query_start_ptr + seq + 1) - first
    if tile_m * BLOCK_M >= query_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    prefix_len = seq_len - query_len
    kv_head = head // GROUP

    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)  # index among this sequence's new tokens
    row_ok = rows < query_len
    query_pos = prefix_len + rows  # position in the sequence
    dims = tl.arange(0, DIM_PAD)
    dim_ok = dims < HEAD_DIM
    q = tl.load(q_ptr + (first + rows)[:, None] * stride_qt + head * stride_qh + dims[None, :],
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
    q = (q.to(tl.float32) * scale).to(DOT)

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DIM_PAD], tl.float32)
    key_end = tl.minimum(seq_len, prefix_len + (tile_m + 1) * BLOCK_M)
    for tile in range(0, key_end, BLOCK_N):
        keys = tile + tl.arange(0, BLOCK_N)
        key_ok = keys < key_end
        pages = tl.load(block_tables_ptr + seq * stride_bt + keys // block_size, mask=key_ok, other=0)
        slots = pages.to(tl.int64) * block_size + keys % block_size
        kv_offsets = slots[:, None] * stride_cs + kv_head * stride_ch + dims[None, :]
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_cache_ptr + kv_offsets, mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + kv_offsets, mask=kv_mask, other=0.0).to(tl.float32)
        scores = tl.dot(q, tl.trans(k.to(DOT)))  # [BLOCK_M, BLOCK_N]
        visible = key_ok[None, :] & (keys[None, :] <= query_pos[:, None])
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        correction = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        l = l * correction + tl.sum(p, axis=1)
        acc = acc * correction[:, None] + tl.dot(p.to(DOT), v.to(DOT))
        m = m_new
    tl.store(out_ptr + (first + rows)[:, None] * stride_ot + head * stride_oh + dims[None, :],
             (acc / l[:, None]).to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])
    # END SOLUTION
# ANCHOR_END: extend_kernel


def extend_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    scale: float,
    max_query_len: int | None = None,
) -> torch.Tensor:
    """Triton extend attention; same arguments and result as extend_attention_reference.

    `max_query_len` (the most new tokens of any sequence) sizes the grid. Give it when
    it is on the host already, as the backend does once per step: reading it from
    `query_start` on a GPU waits for the device, in every layer.
    """
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads cannot share {num_kv_heads} KV heads evenly")
    out = torch.empty_like(q)
    num_seqs = len(seq_lens)
    if num_tokens == 0 or num_seqs == 0:
        return out
    if max_query_len is None:
        max_query_len = int((query_start[1:] - query_start[:-1]).max())  # a device sync on a GPU
    on_cpu = q.device.type == "cpu"
    block_m, block_n = (16, 16) if on_cpu else (64, 64)
    grid = (num_seqs, num_heads, triton.cdiv(max_query_len, block_m))
    _extend_kernel[grid](
        q, k_cache, v_cache, block_tables, query_start.to(device=q.device, dtype=torch.int32),
        seq_lens.to(device=q.device, dtype=torch.int32), out,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), block_tables.stride(0),
        out.stride(0), out.stride(1), scale, block_size,
        GROUP=num_heads // num_kv_heads, HEAD_DIM=head_dim, DIM_PAD=triton.next_power_of_2(head_dim),
        BLOCK_M=block_m, BLOCK_N=block_n, DOT=dot_dtype(q.dtype),
    )
    return out
