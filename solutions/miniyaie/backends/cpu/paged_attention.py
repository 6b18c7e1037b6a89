"""The default CPU attention backend: every row reads the paged cache in place, in C++.

The batched torch backend (../batched_attention.py) gathers every sequence's
context K/V into one tensor per group and layer, then SDPA reads it again.
For a decode row (one query) that copy is most of the work: the row does
two multiply-adds per key and head, the gather moves the key's 1.5 KB.
So here the decode rows go to a C++ loop that follows the block table and
reads each K and V row once, where it lies (kernels.py,
paged_decode_attention.cpp), all decode rows of the step in one call per
layer. Rows whose tables begin with the same block (questions after one
cached system prompt) go to the kernel side by side, and it walks them
block by block: a block they share is read from memory once per group,
not once per row. Prefill and extend chunks go to a second loop
(paged_chunk_attention.cpp) that copies each sequence's keys once into
tiles of one vector register (16 keys with AVX-512, 8 with AVX2) and
scores four query rows against a few tiles at a time, each
query only up to its own position: a causal chunk does half the work of
SDPA with a mask, which computes every key.

The cache may be kept in bfloat16 (`kv_cache_dtype`): the kernels widen each
K and V row as they read it and compute in float32. Where the kernels cannot
run (no compiler, queries in a dtype other than float32, a GPU tensor; for
chunks, a head size other than 64 or 128) those rows take the batched torch
path: same results.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from miniyaie.backends.batched_attention import BatchedTorchAttentionBackend, _attend
from miniyaie.backends.cpu import kernels as cpu_kernels
from miniyaie.model.attention import AttentionMetadata


@dataclass
class _Chunks:
    """The step's chunks of more than one query, as the chunk kernel takes them."""

    first_rows: torch.Tensor  # [m] where each chunk's queries start in the packed batch (int64)
    query_lens: torch.Tensor  # [m] its queries
    seq_lens: torch.Tensor  # [m] its keys, cached prefix and the chunk itself
    block_tables: torch.Tensor  # [m, width] (contiguous int64)


@dataclass
class _DecodeRows:
    """The step's one-query rows, as the kernel takes them: rows that begin with the same block side by side."""

    rows: torch.Tensor  # [n] each row's place in the packed batch (int64)
    seq_lens: torch.Tensor  # [n] keys each row attends, its own included
    block_tables: torch.Tensor  # [n, width] their block tables (contiguous int64)
    group_starts: torch.Tensor  # [groups + 1] rows group_starts[i] .. group_starts[i+1]-1 are attended together


MAX_ROWS_PER_GROUP = 8  # more rows share a block's reads, fewer groups share out the threads' work


# ANCHOR: group_by_first_block
def group_by_first_block(block_tables: torch.Tensor, max_rows: int = MAX_ROWS_PER_GROUP) -> tuple[torch.Tensor, list[int]]:
    """The order that puts rows beginning with the same block side by side, and where each group of at
    most `max_rows` of them starts (then the end). Rows that share a first block share a cached prefix:
    the decode kernel attends a group block by block, so a block they share is read from memory once."""
    firsts = block_tables[:, 0].tolist()
    order = sorted(range(len(firsts)), key=firsts.__getitem__)
    starts = [0] if order else []
    for i in range(1, len(order)):
        if firsts[order[i]] != firsts[order[i - 1]] or i - starts[-1] == max_rows:
            starts.append(i)
    return torch.tensor(order, dtype=torch.int64), starts + [len(order)]
# ANCHOR_END: group_by_first_block


def shared_block_reads(block_tables: torch.Tensor, seq_lens: torch.Tensor, starts: list[int], block_size: int) -> int:
    """Blocks a row has in common with the row before it in its group (same place in both tables, inside both
    sequences): the reads the grouped decode kernel finds in the core's cache instead of memory."""
    if block_tables.shape[0] < 2:
        return 0
    same = block_tables[1:] == block_tables[:-1]
    blocks = (torch.minimum(seq_lens[1:], seq_lens[:-1]) + block_size - 1) // block_size
    inside = torch.arange(block_tables.shape[1]) < blocks[:, None]
    first_of_group = torch.tensor(starts[1:-1], dtype=torch.int64) - 1  # pairs that straddle two groups
    together = torch.ones(len(same), dtype=torch.bool)
    together[first_of_group] = False
    return int((same & inside & together[:, None]).sum())


class PagedCpuAttentionBackend(BatchedTorchAttentionBackend):
    """Same results as `TorchAttentionBackend`; decode rows and chunks through the C++ kernels when they are available."""

    def __init__(self, library=None):
        super().__init__()
        self.library = library if library is not None else cpu_kernels.load()
        self._decode: _DecodeRows | None = None
        self._chunks: _Chunks | None = None
        self.decode_rows_in_kernel = 0  # rows the kernel attended, summed over steps (not layers): a test reads it
        self.decode_blocks_shared = 0  # block reads a decode row shared with the row before it, summed over steps
        self.chunk_rows_in_kernel = 0  # the same for the chunk kernel
        self.num_steps = 0  # steps seen (a test checks that every engine step came through here)
        self._meta_seen: AttentionMetadata | None = None  # the step _decode and _chunks describe

    def _usable(self, q: torch.Tensor, k_cache: torch.Tensor) -> bool:
        return (self.library is not None and q.device.type == "cpu"
                and q.dtype == torch.float32 and k_cache.dtype in cpu_kernels.CACHE_TYPES)

    def _new_step(self, meta: AttentionMetadata) -> None:
        """Once per step: its decode rows and its chunks, as the kernels take them."""
        starts = torch.tensor([0, *meta.query_lens]).cumsum(0)[:-1]
        query_lens, seq_lens = torch.tensor(meta.query_lens, dtype=torch.int64), torch.tensor(meta.seq_lens, dtype=torch.int64)
        decode, chunks = (query_lens == 1).nonzero().flatten(), (query_lens > 1).nonzero().flatten()
        if -(-int(seq_lens.max()) // meta.block_size) > meta.block_tables.shape[1]:  # a kernel would read past the table
            raise ValueError("block_tables has fewer blocks than the longest sequence needs")
        tables = meta.block_tables.to(torch.int64)
        order, group_starts = group_by_first_block(tables[decode])
        decode = decode[order]
        self._decode = _DecodeRows(starts[decode].contiguous(), seq_lens[decode].contiguous(), tables[decode].contiguous(),
                                   torch.tensor(group_starts, dtype=torch.int64))
        self.decode_blocks_shared += shared_block_reads(self._decode.block_tables, self._decode.seq_lens, group_starts,
                                                        meta.block_size)
        self._chunks = _Chunks(starts[chunks].contiguous(), query_lens[chunks].contiguous(),
                               seq_lens[chunks].contiguous(), tables[chunks].contiguous())
        self._meta_seen = meta
        self.num_steps += 1
        self.decode_rows_in_kernel += decode.numel()

    def decode_rows(self, meta: AttentionMetadata) -> _DecodeRows:
        """The step's decode rows as the kernel takes them (backends/cpu/decode_stack.py runs the layers itself)."""
        if meta is not self._meta_seen:
            self._new_step(meta)
        return self._decode

    def forward(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        if not self._usable(q, k_cache):
            return super().forward(q, k, v, k_cache, v_cache, meta, scale)
        k_cache.index_copy_(0, meta.slot_mapping, k.to(k_cache.dtype))
        v_cache.index_copy_(0, meta.slot_mapping, v.to(v_cache.dtype))
        first_layer = meta is not self._meta_seen
        if first_layer:
            self._new_step(meta)
        q = q.contiguous()
        out = torch.empty_like(q)
        decode, chunks = self._decode, self._chunks
        if decode.rows.numel():
            cpu_kernels.paged_decode_attention(self.library, q, k_cache, v_cache, decode.block_tables, decode.rows,
                                               decode.seq_lens, decode.group_starts, meta.block_size, scale, out)
        if chunks.first_rows.numel():
            done = cpu_kernels.paged_chunk_attention(self.library, q, k_cache, v_cache, chunks.block_tables,
                                                     chunks.first_rows, chunks.query_lens, chunks.seq_lens,
                                                     meta.block_size, scale, out)
            if first_layer and done:  # count the step's chunk rows once, not per layer
                self.chunk_rows_in_kernel += int(chunks.query_lens.sum())
            if not done:  # a head size the kernel was not built for: the batched torch path
                plan = self.plan(meta, k_cache, with_decode=False)
                for group in plan.groups:
                    result = _attend(group, plan.piece, q, k_cache, v_cache, scale)
                    out.index_copy_(0, group.out_rows, result.index_select(0, group.valid_rows))
        return out
