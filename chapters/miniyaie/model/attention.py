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
# ANCHOR: metadata_fields
@dataclass
class AttentionMetadata:
    """Where one step's tokens live in the KV cache. Built once per step, shared by all layers."""

    query_lens: list[int]  # new tokens of each sequence in this step
    seq_lens: list[int]  # cached + new tokens of each sequence after this step
    slot_mapping: torch.Tensor  # [num_tokens] cache slot of each new token (int64)
    block_tables: torch.Tensor  # [num_seqs, max_blocks] physical block ids (int64)
    block_size: int  # slots per block
    # ANCHOR_END: metadata_fields

    def context_slots(self, seq: int) -> torch.Tensor:
        """The cache slots holding sequence `seq`'s tokens 0..seq_len-1, in order (int64, on the tables' device).

        Token p of the sequence sits in block block_tables[seq, p // block_size]
        at offset p % block_size, i.e. in slot block * block_size + offset.
        Entries of block_tables past the blocks the sequence uses are padding.
        """
        # ANCHOR_END: metadata_contract
        # Idea: a block table is a page table: what does one entry stand for, and how many entries are real?
        # Stuck? `miniyaie hint 0.4` prints hints, one level at a time.
        # TODO(Task 0.4): Attention over a growing cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 4: Attention over a growing cache — see book/src/ch00_model.md')
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
        """Attend every new query over its sequence's context (this step's tokens included); leave the new K/V in the cache."""
        ...


# ANCHOR: causal_attention
def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention of one sequence's newest num_new tokens over its whole context.

    q: [num_new, num_heads, head_dim]; k, v: [context_len, num_kv_heads, head_dim],
    the sequence's tokens in order, the new ones last (context_len >= num_new).
    Returns [num_new, num_heads, head_dim] in q's dtype: each query attends
    (softmax of scale * q . k) to exactly the keys at or before its own
    position, never a later one. GQA: the query heads form num_kv_heads
    consecutive groups of equal size; group g reads K/V head g.
    """
    # Idea: the queries are not tokens 0 .. num_new - 1 of the sequence: which key is the last one each may see?
    # Stuck? `miniyaie hint 0.4` prints hints, one level at a time.
    # TODO(Task 0.4): Attention over a growing cache. Replace this line with your code.
    raise NotImplementedError('Chapter 0, Task 4: Attention over a growing cache — see book/src/ch00_model.md')
# ANCHOR_END: causal_attention


# ANCHOR: torch_backend
class TorchAttentionBackend:
    """The plain-torch reference backend: readable, runs anywhere, one sequence at a time."""

    def forward(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """One packed step of attention over a cache that the step also fills.

        q, k, v: every sequence's new tokens, in the order of meta.query_lens.
        Sequence s's context is its seq_lens[s] tokens at meta.context_slots(s),
        earlier steps' and this step's together. Returns [num_tokens, num_heads,
        head_dim] in q's order, each row as causal_attention defines it (so any
        cut of a sequence into steps gives the same rows). Afterwards new token
        t's K/V sit at slot meta.slot_mapping[t] (cache dtype); no other slot changes.
        """
        # Idea: where is a new token's own key when its query needs it?
        # Stuck? `miniyaie hint 0.4` prints hints, one level at a time.
        # TODO(Task 0.4): Attention over a growing cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 4: Attention over a growing cache — see book/src/ch00_model.md')
# ANCHOR_END: torch_backend
