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
    # Idea: which keys may each query row see, and which key tiles can this whole query tile skip?
    # Stuck? `miniyaie hint 4.1` prints hints, one level at a time.
    # TODO(Task 4.1): Attention over the paged cache. Replace this line with your code.
    raise NotImplementedError('Chapter 4, Task 1: Attention over the paged cache — see book/src/ch04_triton_kernels.md')
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
