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
        # Nudge: a block table is a page table: what does one entry stand for, and how many entries are real?
        # Hint 1: The sequence's tokens fill its blocks in table order, block_size slots each,
        #   so its first ceil(seq_len / block_size) entries hold it and the rest is padding.
        #   The answer has exactly seq_len slots: the last block may be partly filled.
        # Hint 2: Take the first ceil(seq_len / block_size) entries of the sequence's row
        #   of block_tables; expand every block into its block_size slots in order (an outer
        #   sum with arange(block_size)); flatten and keep the first seq_len.
        # Hint 3:
        #   length = seq_lens[seq]
        #   blocks = block_tables[seq, : ceil(length / block_size)]
        #   slots = blocks[:, None] * block_size + arange(block_size)[None, :]
        #   return slots.flatten()[:length]
        # BEGIN SOLUTION 0.4: Attention over a growing cache
        length = self.seq_lens[seq]
        num_blocks = -(-length // self.block_size)
        blocks = self.block_tables[seq, :num_blocks]
        offsets = torch.arange(self.block_size, device=blocks.device)
        return (blocks[:, None] * self.block_size + offsets[None, :]).flatten()[:length]
        # END SOLUTION
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
    # Nudge: the queries are not tokens 0 .. num_new - 1 of the sequence: which key is the last one each may see?
    # Hint 1: The queries are the context's last num_new tokens, so query i sits as many
    #   positions past i as there are cached tokens, and sees every key up to its own position.
    #   A decode step (one query) sees every key; a prefill (num_new == context_len) is the
    #   usual lower triangle; a chunk is a triangle shifted right. Each query head reads the
    #   K/V head of its group. Softmax in float32.
    # Hint 2: Repeat each K/V head `group` times along the head dimension so that K and V
    #   have num_heads heads (repeat_interleave keeps head h next to its group). Scores are
    #   q . k over head_dim, times scale, one [num_new, context_len] matrix per head. Set the
    #   score of every key after the query's position (query i is at context_len - num_new + i)
    #   to -inf, softmax over the keys,
    #   weight V by the probabilities and return the result in q's dtype.
    # Hint 3:
    #   group = num_heads // num_kv_heads
    #   k, v = repeat_interleave(k, group, dim=1), repeat_interleave(v, group, dim=1)
    #   scores[h, i, j] = scale * sum_d q[i, h, d] * k[j, h, d]   (in float32)
    #   visible[i, j] = j <= context_len - num_new + i   (ones(...).tril(context_len - num_new))
    #   scores = where(visible, scores, -inf); probs = softmax(scores, over j)
    #   out[i, h, d] = sum_j probs[h, i, j] * v[j, h, d]; return out in q.dtype
    # BEGIN SOLUTION 0.4: Attention over a growing cache
    num_new, num_heads, _ = q.shape
    context_len, num_kv_heads, _ = k.shape
    group = num_heads // num_kv_heads
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * scale
    visible = torch.ones(num_new, context_len, dtype=torch.bool, device=q.device).tril(context_len - num_new)
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = scores.softmax(dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v.float()).to(q.dtype)
    # END SOLUTION
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
        # Nudge: where is a new token's own key when its query needs it?
        # Hint 1: The cache is the only place a sequence's whole context lives, and a new token
        #   is part of its own context: its K/V must be in the cache before anything reads it.
        #   So the write (every new token's K/V where the slot mapping says) comes before the
        #   reads. Rows of q belong to sequences in order: sequence s owns the next query_lens[s] rows.
        # Hint 2: Assign k and v (cast to the cache's dtype) into k_cache and v_cache at
        #   meta.slot_mapping. Then walk the sequences with a running row offset: for sequence
        #   s take its query_lens[s] rows of q, gather its context K/V with meta.context_slots(s),
        #   run causal_attention on them and store the result in the same rows of the output;
        #   advance the offset.
        # Hint 3:
        #   k_cache[slot_mapping] = k; v_cache[slot_mapping] = v      (cast to the cache dtype)
        #   out = empty like q; start = 0
        #   for s, n in enumerate(query_lens):
        #       slots = meta.context_slots(s)
        #       out[start : start + n] = causal_attention(q[start : start + n], k_cache[slots], v_cache[slots], scale)
        #       start += n
        #   return out
        # BEGIN SOLUTION 0.4: Attention over a growing cache
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
        # END SOLUTION
# ANCHOR_END: torch_backend
