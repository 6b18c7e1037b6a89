"""The default CPU attention backend: decode rows read the paged cache in place, chunks are batched.

The batched torch backend (batched_attention.py) gathers every sequence's
context K/V into one tensor per group and layer, then SDPA reads it again.
For a decode row (one query) that copy is most of the work: the row does
two multiply-adds per key and head, the gather moves the key's 1.5 KB.
So here the decode rows go to a C++ loop that follows the block table and
reads each K and V row once, where it lies (cpu_kernels.py,
paged_decode_attention.cpp), all decode rows of the step in one call per
layer. Prefill and extend chunks (many queries per key, where a matmul
pays for the gather) keep the batched torch path.

Where the kernel cannot run (no compiler, a dtype other than float32, a
GPU tensor) every row takes the batched torch path: same results.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from miniyaie.model import cpu_kernels
from miniyaie.model.attention import AttentionMetadata
from miniyaie.model.batched_attention import BatchedTorchAttentionBackend, StepPlan, _attend


@dataclass
class _DecodeRows:
    """The step's one-query rows, as the kernel takes them."""

    rows: torch.Tensor  # [n] each row's place in the packed batch (int64)
    seq_lens: torch.Tensor  # [n] keys each row attends, its own included
    block_tables: torch.Tensor  # [n, width] their block tables (contiguous int64)


class PagedCpuAttentionBackend(BatchedTorchAttentionBackend):
    """Same results as `TorchAttentionBackend`; decode rows through the C++ kernel when it is available."""

    def __init__(self, library=None):
        super().__init__()
        self.library = library if library is not None else cpu_kernels.load()
        self._decode: _DecodeRows | None = None
        self.decode_rows_in_kernel = 0  # rows the kernel attended, summed over steps (not layers): a test reads it

    def _usable(self, q: torch.Tensor, k_cache: torch.Tensor) -> bool:
        return (self.library is not None and q.device.type == "cpu"
                and q.dtype == torch.float32 and k_cache.dtype == torch.float32)

    def _plan_with_kernel(self, meta: AttentionMetadata, k_cache: torch.Tensor) -> StepPlan:
        """The batched plan of the step's chunks, and (once per step) its decode rows for the kernel."""
        new_step = meta is not self._meta
        plan = self.plan(meta, k_cache, with_decode=False)
        if new_step:
            starts = torch.tensor([0, *meta.query_lens]).cumsum(0)[:-1]
            decode = torch.tensor([s for s, n in enumerate(meta.query_lens) if n == 1], dtype=torch.int64)
            longest = max((meta.seq_lens[s] for s in decode.tolist()), default=0)
            if -(-longest // meta.block_size) > meta.block_tables.shape[1]:  # the kernel would read past the table
                raise ValueError("block_tables has fewer blocks than the longest sequence needs")
            self._decode = _DecodeRows(
                starts[decode].contiguous(), torch.tensor(meta.seq_lens, dtype=torch.int64)[decode].contiguous(),
                meta.block_tables.to(torch.int64)[decode].contiguous(),
            )
            self.decode_rows_in_kernel += decode.numel()
        return plan

    def forward(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        if not self._usable(q, k_cache):
            return super().forward(q, k, v, k_cache, v_cache, meta, scale)
        k_cache.index_copy_(0, meta.slot_mapping, k)
        v_cache.index_copy_(0, meta.slot_mapping, v)
        plan = self._plan_with_kernel(meta, k_cache)
        q = q.contiguous()
        out = torch.empty_like(q)
        decode = self._decode
        if decode.rows.numel():
            cpu_kernels.paged_decode_attention(self.library, q, k_cache, v_cache, decode.block_tables, decode.rows,
                                               decode.seq_lens, meta.block_size, scale, out)
        for group in plan.groups:
            result = _attend(group, plan.piece, q, k_cache, v_cache, scale)
            out.index_copy_(0, group.out_rows, result.index_select(0, group.valid_rows))
        return out
