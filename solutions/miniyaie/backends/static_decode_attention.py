"""Decode attention whose launches depend only on the padded batch size: what a CUDA graph can record.

Why: the engine's backends size their work from the step's host lists (the
longest context, the split count), so a graph recorded at one step would
replay the wrong sizes at the next. `StaticDecodeBackend` wraps the engine's
backend; for a `StaticDecodeMetadata` (a padded decode batch over the static
buffers) it stores the new K/V and attends with sizes fixed per padded size:
the Triton decode kernel with the metadata's split count and context bound
(its lengths from `seq_lens_tensor` on the device), or, with any other
backend, a dense masked attention over the block tables' full width in torch
(the CPU path that tests the static-input logic). Every other step goes to
the wrapped backend unchanged; its attributes (e.g. the triton backend's
`launches`) stay readable through the wrapper.
"""

from __future__ import annotations

import torch

from miniyaie.backends.static_inputs import StaticDecodeMetadata


def torch_static_decode(q, k_cache, v_cache, meta: StaticDecodeMetadata, scale: float) -> torch.Tensor:
    """One query per row over the row's first seq_lens_tensor[row] tokens, shapes fixed by the tables' width."""
    rows, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    offsets = torch.arange(meta.block_size, device=q.device)
    slots = (meta.block_tables[:, :, None] * meta.block_size + offsets).reshape(rows, -1)  # [rows, max_seq_len]
    keys = k_cache[slots].float().repeat_interleave(num_heads // num_kv_heads, dim=2)  # [rows, L, heads, dim]
    values = v_cache[slots].float().repeat_interleave(num_heads // num_kv_heads, dim=2)
    scores = torch.einsum("rhd,rlhd->rhl", q.float(), keys) * scale
    visible = torch.arange(slots.shape[1], device=q.device)[None, :] < meta.seq_lens_tensor[:, None]
    scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
    return torch.einsum("rhl,rlhd->rhd", scores.softmax(dim=-1), values).to(q.dtype)


class StaticDecodeBackend:
    """The engine's backend, plus graph-safe decode for static metadata; `static_calls` counts those layers."""

    def __init__(self, inner):
        self.inner = inner
        self.static_calls = 0  # layers that ran the static decode: proof the captured path is the one used
        self._triton = type(inner).__name__ == "TritonAttentionBackend"

    def __getattr__(self, name):
        return getattr(self.inner, name)  # only for names not set above (launches, num_plans, ...)

    def forward(self, q, k, v, k_cache, v_cache, meta, scale: float) -> torch.Tensor:
        if not isinstance(meta, StaticDecodeMetadata):
            return self.inner.forward(q, k, v, k_cache, v_cache, meta, scale)
        self.static_calls += 1
        if self._triton:
            from miniyaie.kernels.decode_attention_kernel import decode_attention
            from miniyaie.kernels.store_kv_kernel import store_kv

            store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
            self.inner.launches["decode"] += 1  # the same kernel (counted when recorded: a replay runs no Python)
            return decode_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens_tensor, meta.block_size,
                                    scale, num_splits=meta.num_splits, max_seq_len=meta.max_seq_len)
        k_cache.index_copy_(0, meta.slot_mapping, k.to(k_cache.dtype))
        v_cache.index_copy_(0, meta.slot_mapping, v.to(v_cache.dtype))
        return torch_static_decode(q, k_cache, v_cache, meta, scale)


def static_num_splits(backend, num_rows: int, num_kv_heads: int, max_seq_len: int, device: torch.device) -> int:
    """The decode kernel's split count for a padded size (1 for the torch path, which does not split)."""
    inner = backend.inner if isinstance(backend, StaticDecodeBackend) else backend
    if type(inner).__name__ != "TritonAttentionBackend":
        return 1
    from miniyaie.kernels.decode_attention_kernel import decode_block_n, default_num_splits

    return default_num_splits(num_rows, num_kv_heads, max_seq_len, decode_block_n(torch.device(device)))
