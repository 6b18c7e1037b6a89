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
# ANCHOR: metadata_contract
@dataclass
class AttentionMetadata:
    """Where one step's tokens live in the KV cache. Built once per step, shared by all layers."""

    query_lens: list[int]  # new tokens of each sequence in this step
    seq_lens: list[int]  # cached + new tokens of each sequence after this step
    slot_mapping: torch.Tensor  # [num_tokens] cache slot of each new token (int64)
    block_tables: torch.Tensor  # [num_seqs, max_blocks] physical block ids (int64)
    block_size: int  # slots per block

    def context_slots(self, seq: int) -> torch.Tensor:
        """The cache slots holding sequence `seq`'s tokens 0..seq_len-1, in order (int64, on the tables' device).

        Token p of the sequence sits in block block_tables[seq, p // block_size]
        at offset p % block_size, i.e. in slot block * block_size + offset.
        Entries of block_tables past the blocks the sequence uses are padding.
        """
        # ANCHOR_END: metadata_contract
        # Idea: a block table is a page table: expand each block id into its block_size slots.
        # Stuck? `miniyaie hint 0.5` prints hints, one level at a time.
        # TODO(Task 0.5): Write the cache, then attend over it. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 5: Write the cache, then attend over it — see book/src/ch00_model.md')
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
    with context_len >= num_new; returns [num_new, num_heads, head_dim] in q's
    dtype. The new tokens are the last num_new of the context, and each sees
    the keys up to its own position, none after it. Grouped-query attention:
    the query heads form num_kv_heads consecutive groups of equal size, and
    group g reads K/V head g.
    """
    # Idea: the causal mask is shifted: the new queries are the last num_new tokens of the context.
    # Stuck? `miniyaie hint 0.4` prints hints, one level at a time.
    # TODO(Task 0.4): Causal attention over a KV cache. Replace this line with your code.
    raise NotImplementedError('Chapter 0, Task 4: Causal attention over a KV cache — see book/src/ch00_model.md')
# ANCHOR_END: causal_attention


# ANCHOR: torch_backend
class TorchAttentionBackend:
    """The plain-torch reference backend: readable, runs anywhere, one sequence at a time."""

    def forward(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """Write the step's new K/V into the cache, then attend each sequence's queries over its context.

        q, k, v hold every sequence's new tokens one after the other, in the
        order of meta.query_lens; new token t's K/V go to cache slot
        meta.slot_mapping[t] (in the cache's dtype). Sequence s's context is
        the seq_lens[s] tokens that meta.context_slots(s) lists, cached prefix
        and new tokens together. Returns [num_tokens, num_heads, head_dim], the
        rows in q's order.
        """
        # Idea: write first, then read: the new tokens are part of their own context.
        # Stuck? `miniyaie hint 0.5` prints hints, one level at a time.
        # TODO(Task 0.5): Write the cache, then attend over it. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 5: Write the cache, then attend over it — see book/src/ch00_model.md')
# ANCHOR_END: torch_backend
