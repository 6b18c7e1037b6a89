"""Attention over a KV cache, behind one interface that every backend implements.

A step's tokens from all sequences are packed into one flat batch
(`num_tokens` rows). The cache is one flat tensor of slots per layer; the
metadata says which slot each new token's K/V goes to (`slot_mapping`) and
which slots each sequence reads (`block_tables` of `block_size` slots each).
Chapter 0 gives each sequence one block as long as its maximum length (a
contiguous cache); chapter 2 cuts the same cache into small pages, and
chapter 4 adds a Triton backend, without changing this interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


# ANCHOR: metadata
@dataclass
class AttentionMetadata:
    """Where one step's tokens live in the KV cache. Built once per step, shared by all layers."""

    query_lens: list[int]  # new tokens of each sequence in this step
    seq_lens: list[int]  # cached + new tokens of each sequence after this step
    slot_mapping: torch.Tensor  # [num_tokens] cache slot of each new token (int64)
    block_tables: torch.Tensor  # [num_seqs, max_blocks] physical block ids (int64)
    block_size: int  # slots per block

    def context_slots(self, seq: int) -> torch.Tensor:
        """The cache slots holding sequence `seq`'s tokens 0..seq_len-1, in order."""
        length = self.seq_lens[seq]
        num_blocks = -(-length // self.block_size)
        blocks = self.block_tables[seq, :num_blocks]
        offsets = torch.arange(self.block_size, device=blocks.device)
        return (blocks[:, None] * self.block_size + offsets[None, :]).flatten()[:length]
# ANCHOR_END: metadata


class AttentionBackend(Protocol):
    def forward(
        self,
        q: torch.Tensor,  # [num_tokens, num_heads, head_dim], RoPE applied
        k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], RoPE applied
        v: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        k_cache: torch.Tensor,  # [num_slots, num_kv_heads, head_dim] of this layer
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
        """Write the new K/V into the cache, then attend each query to its sequence's context."""
        ...


# ANCHOR: causal_attention
def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention of one sequence's new queries over its whole context (cached + new).

    q: [num_new, num_heads, head_dim]; k, v: [context_len, num_kv_heads, head_dim]
    with context_len >= num_new. The new tokens are the last num_new of the
    context, so query i sits at position context_len - num_new + i and may
    see keys 0..that position. Grouped-query attention: query head h reads
    kv head h // (num_heads // num_kv_heads).
    """
    # Hint: repeat k and v along the head dim (repeat_interleave) to num_heads;
    # scores = einsum("qhd,khd->hqk") * scale; mask key j > query position with -inf
    # (torch.ones(...).tril(diagonal=context_len - num_new)); softmax in float32
    # over keys; out = einsum("hqk,khd->qhd"); return it in q's dtype.
    # TODO(Task 0.4): Causal attention over a KV cache. Replace this line with your code.
    raise NotImplementedError('Chapter 0, Task 4: Causal attention over a KV cache — see book/src/ch00_model.md')
# ANCHOR_END: causal_attention


# ANCHOR: torch_backend
class TorchAttentionBackend:
    """The plain-torch reference backend: readable, runs anywhere, one sequence at a time."""

    def forward(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        k_cache[meta.slot_mapping] = k.to(k_cache.dtype)
        v_cache[meta.slot_mapping] = v.to(v_cache.dtype)
        out = torch.empty_like(q)
        start = 0
        for seq, num_new in enumerate(meta.query_lens):
            slots = meta.context_slots(seq)
            out[start : start + num_new] = causal_attention(
                q[start : start + num_new], k_cache[slots], v_cache[slots], scale
            )
            start += num_new
        return out
# ANCHOR_END: torch_backend
