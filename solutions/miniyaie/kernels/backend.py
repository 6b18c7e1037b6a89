"""The Triton attention backend and layer ops: chapter 4's kernels behind chapter 0's interfaces."""

from __future__ import annotations

import torch

from miniyaie.kernels.activation import silu_and_mul
from miniyaie.kernels.decode_attention_kernel import decode_attention, decode_block_n, default_num_splits
from miniyaie.kernels.extend_attention_kernel import extend_attention
from miniyaie.kernels.rms_norm_kernel import rms_norm
from miniyaie.kernels.rotary_kernel import rotary
from miniyaie.kernels.store_kv_kernel import store_kv
from miniyaie.model import AttentionMetadata, LayerOps


# ANCHOR: triton_backend
class TritonAttentionBackend:
    """Chapter 0's AttentionBackend on the Triton kernels: one attention launch for a whole step.

    The decode kernel (one query per sequence, split-KV) runs on every step it
    can compute, the extend kernel on every other. The per-step sizes are made
    once per step (the layers of a step share its metadata object) and never
    make the host wait for the device.
    """

    def __init__(self):
        self._meta: AttentionMetadata | None = None  # the step the values below describe
        self.launches = {"decode": 0, "extend": 0}  # counters: proof of which kernel ran

    def _step_values(self, meta: AttentionMetadata, q: torch.Tensor, k_cache: torch.Tensor):
        """(seq_lens, query_start, max_query_len) of the step, built once and shared by every layer.

        seq_lens: int32 [num_seqs] on q's device; query_start: int32 [num_seqs + 1] on q's device,
        sequence s owning the packed rows query_start[s] .. query_start[s + 1] - 1 (the last
        entry is the number of rows); max_query_len: an int. Also sets self._max_seq_len (an
        int: the longest context of the step, its new tokens included) for the decode kernel.
        On a GPU it never makes the host wait for the device.
        """
        if meta is not self._meta:
            # Nudge: the kernels index packed rows by sequence; where can the sizes come from without a wait?
            # Hint 1: The packed q holds every sequence's new tokens one after another, so a kernel
            #   finds sequence s's rows through a table of where each starts, plus one entry for
            #   the end: 0, then the running total of the query lengths. The grid sizes (the
            #   longest query, the longest context) must not be read back from a device tensor:
            #   on a GPU that waits for all queued work, in every layer. The metadata's lists are
            #   on the host already.
            # Hint 2: Make an int32 tensor of query_lens; its cumulative sum with a 0 in front is
            #   query_start (move it to q's device as int32). seq_lens as an int32 tensor on q's
            #   device. The maxima are Python max() over the lists (a step has at least one sequence).
            # Hint 3:
            #   query_lens = torch.tensor(meta.query_lens, dtype=torch.int32)
            #   self._seq_lens = torch.tensor(meta.seq_lens, dtype=torch.int32, device=q.device)
            #   self._query_start = pad(query_lens.cumsum(0), (1, 0)).to(q.device, torch.int32)
            #   self._max_query_len = max(meta.query_lens); self._max_seq_len = max(meta.seq_lens)
            # BEGIN SOLUTION 4.4: The backend's step
            query_lens = torch.tensor(meta.query_lens, dtype=torch.int32)
            self._seq_lens = torch.tensor(meta.seq_lens, dtype=torch.int32, device=q.device)
            self._query_start = torch.nn.functional.pad(query_lens.cumsum(0), (1, 0)).to(q.device, torch.int32)
            self._max_query_len = max(meta.query_lens)
            self._max_seq_len = max(meta.seq_lens)
            # END SOLUTION
            num_kv_heads = k_cache.shape[1]
            self._num_splits = default_num_splits(len(meta.seq_lens), num_kv_heads, self._max_seq_len, decode_block_n(q.device))
            self._meta = meta
        return self._seq_lens, self._query_start, self._max_query_len

    def forward(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """Chapter 0's AttentionBackend.forward: the attention of this step's queries, as TorchAttentionBackend gives it.

        Afterwards the pool holds this step's K/V (k, v) at meta.slot_mapping. Each call is
        exactly one attention launch, counted in self.launches["decode"] or ["extend"]: the
        decode_attention kernel (with the step's split count and longest context,
        self._num_splits and self._max_seq_len) on every step it can compute, extend_attention
        (with the longest query) on every other.
        """
        # Nudge: what must be in the pool before a kernel reads it, and which steps can the decode kernel take?
        # Hint 1: Both kernels read every key, the new ones included, from the pool, so the new K/V
        #   must be in it before either runs. The decode kernel assumes one query per sequence
        #   and splits long contexts for parallelism; the extend kernel handles any query
        #   lengths (one-token ones too) with a causal mask. The step's longest query tells
        #   which case this is.
        # Hint 2: store_kv the new K/V through the slot mapping. Get the step's values. If the
        #   longest query is 1: count a decode launch and return decode_attention(..., num_splits=,
        #   max_seq_len=). Otherwise count an extend launch and return extend_attention with
        #   query_start, seq_lens and the longest query.
        # Hint 3:
        #   store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        #   seq_lens, query_start, max_query_len = self._step_values(meta, q, k_cache)
        #   if max_query_len == 1: launches["decode"] += 1; return decode_attention(q, k_cache, v_cache, meta.block_tables,
        #       seq_lens, meta.block_size, scale, num_splits=self._num_splits, max_seq_len=self._max_seq_len)
        #   launches["extend"] += 1; return extend_attention(q, k_cache, v_cache, meta.block_tables, query_start, seq_lens,
        #       meta.block_size, scale, max_query_len)
        # BEGIN SOLUTION 4.4: The backend's step
        store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        seq_lens, query_start, max_query_len = self._step_values(meta, q, k_cache)
        if max_query_len == 1:
            self.launches["decode"] += 1
            return decode_attention(q, k_cache, v_cache, meta.block_tables, seq_lens, meta.block_size, scale,
                                    num_splits=self._num_splits, max_seq_len=self._max_seq_len)
        self.launches["extend"] += 1
        return extend_attention(
            q, k_cache, v_cache, meta.block_tables, query_start, seq_lens, meta.block_size, scale, max_query_len
        )
        # END SOLUTION
# ANCHOR_END: triton_backend


# ANCHOR: triton_layer_ops
class TritonLayerOps(LayerOps):
    """Chapter 0's LayerOps with fused kernels: add + RMSNorm, in-place RoPE, SiLU-and-mul."""

    def __init__(self):
        self.calls = {"rms_norm": 0, "rotary": 0, "swiglu": 0}  # counters: proof the kernels ran

    def rms_norm(self, x, weight, eps, residual=None):
        self.calls["rms_norm"] += 1
        return rms_norm(x, weight, eps, residual)

    def rotary(self, q, k, cos, sin):
        self.calls["rotary"] += 1
        rotary(q, k, cos, sin)
        return q, k

    def swiglu(self, x, gate_proj, up_proj, down_proj):
        self.calls["swiglu"] += 1
        return down_proj(silu_and_mul(gate_proj(x), up_proj(x)))
# ANCHOR_END: triton_layer_ops
