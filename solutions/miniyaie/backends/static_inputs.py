"""Persistent input buffers for decode steps: the tensors a captured CUDA graph reads.

Why: a CUDA graph replays the kernels it recorded with the addresses it
recorded, so a step's inputs must arrive in the same tensors every time. A
`StaticDecodeInputs` allocates them once, for the largest padded batch, and
each decode step is copied into their first rows; the rest of a padded batch
are padding rows that write and read only a scratch block of the KV pool
(one block the paged memory never hands out), so they never touch a live
request's K/V. The outputs of the padded batch are cut back to the real rows.

The metadata the captured step sees (`StaticDecodeMetadata`) has a fixed
shape per padded size: the block tables are as wide as the longest context
the buffers accept, and the decode kernel's split count and longest-context
bound are fixed (`max_seq_len` is the tables' width in tokens), so the
kernel's grid never changes between replays.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from miniyaie.model import AttentionMetadata

DEFAULT_LADDER_CAP = 64


def batch_ladder(cap: int = DEFAULT_LADDER_CAP) -> list[int]:
    """The padded batch sizes a graph is kept for: 1, 2, 4, 8, then every 8 up to `cap` (vLLM's shape).

    Powers of two alone would pad 33 rows to 64; steps of 8 past 8 waste at most 7 rows.
    """
    if cap < 1:
        raise ValueError(f"the batch ladder needs a cap >= 1, got {cap}")
    sizes = [s for s in (1, 2, 4, 8) if s <= cap] + list(range(16, cap + 1, 8))
    return sizes if sizes[-1] == cap else sizes + [cap]


def padded_size(num_rows: int, ladder: list[int]) -> int | None:
    """The smallest ladder size holding `num_rows` rows; None when the batch is past the ladder."""
    return next((size for size in ladder if size >= num_rows), None)


@dataclass
class StaticDecodeMetadata(AttentionMetadata):
    """AttentionMetadata of a padded decode batch whose tensors are views of the static buffers.

    `seq_lens` (the host list) holds only the bound `max_seq_len` for every row: the true
    lengths are in `seq_lens_tensor` on the device, refilled every step. `num_splits` is the
    decode kernel's split count, fixed for this padded size.
    """

    seq_lens_tensor: torch.Tensor | None = None  # int32 [padded rows]
    max_seq_len: int = 0  # the longest context a row may have: the tables' width in tokens
    num_splits: int = 1


class StaticDecodeInputs:
    """Decode-step inputs in tensors allocated once; `fill` copies a step in, padding to a ladder size.

    Rows past the step's rows are padding: token 0 at position 0, writing its K/V to the
    first slot of `scratch_block` and reading only that slot (context length 1).
    """

    def __init__(self, max_rows: int, max_blocks_per_seq: int, block_size: int, scratch_block: int,
                 device: torch.device | str):
        self.max_rows, self.max_blocks_per_seq, self.block_size = max_rows, max_blocks_per_seq, block_size
        self.scratch_block = scratch_block
        self.device = torch.device(device)
        on = dict(device=self.device)
        self.input_ids = torch.zeros(max_rows, dtype=torch.int64, **on)
        self.positions = torch.zeros(max_rows, dtype=torch.int64, **on)
        self.slot_mapping = torch.full((max_rows,), scratch_block * block_size, dtype=torch.int64, **on)
        self.block_tables = torch.full((max_rows, max_blocks_per_seq), scratch_block, dtype=torch.int64, **on)
        self.seq_lens = torch.ones(max_rows, dtype=torch.int32, **on)
        # The host's lengths go through pinned memory, so their copy does not make the host wait.
        pinned = self.device.type == "cuda"
        self._seq_lens_host = torch.ones(max_rows, dtype=torch.int32, device="cpu", pin_memory=pinned)  # host memory even under a CUDA default device
        self._host_copy_done = torch.cuda.Event() if pinned else None  # the staging is reused only after its copy

    def pad_all(self) -> None:
        """Every row becomes padding (before recording a graph: its warm-up runs write K/V)."""
        self.input_ids.zero_()
        self.positions.zero_()
        self.slot_mapping.fill_(self.scratch_block * self.block_size)
        self.block_tables.fill_(self.scratch_block)
        self.seq_lens.fill_(1)

    @property
    def max_seq_len(self) -> int:
        return self.max_blocks_per_seq * self.block_size

    def accepts(self, meta: AttentionMetadata, ladder: list[int]) -> bool:
        """Whether this step fits: pure decode, at most the ladder's largest size, tables not too wide."""
        return (bool(meta.query_lens) and all(n == 1 for n in meta.query_lens)
                and len(meta.query_lens) <= min(self.max_rows, ladder[-1])
                and meta.block_size == self.block_size
                and meta.block_tables.shape[1] <= self.max_blocks_per_seq
                and max(meta.seq_lens) <= self.max_seq_len)

    def fill(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata, size: int) -> None:
        """Copy a decode step of n = len(meta.seq_lens) rows into rows 0..n-1, and pad rows n..size-1.

        Rows left from a bigger earlier step are reset to padding, so nothing stale is read.
        """
        n = len(meta.seq_lens)
        if n > size or size > self.max_rows:
            raise ValueError(f"cannot pad {n} rows to {size} (buffers hold {self.max_rows})")
        width = meta.block_tables.shape[1]
        self.input_ids[:n].copy_(input_ids, non_blocking=True)
        self.positions[:n].copy_(positions, non_blocking=True)
        self.slot_mapping[:n].copy_(meta.slot_mapping, non_blocking=True)
        self.block_tables[:size].fill_(self.scratch_block)
        self.block_tables[:n, :width].copy_(meta.block_tables, non_blocking=True)
        if self._host_copy_done is not None:
            self._host_copy_done.synchronize()  # the last step's copy has read the staging (long done, in practice)
        self._seq_lens_host[:n] = torch.tensor(meta.seq_lens, dtype=torch.int32, device="cpu")
        self._seq_lens_host[n:size] = 1
        self.seq_lens[:size].copy_(self._seq_lens_host[:size], non_blocking=True)
        if self._host_copy_done is not None:
            self._host_copy_done.record()
        if size > n:
            self.input_ids[n:size].zero_()
            self.positions[n:size].zero_()
            self.slot_mapping[n:size].fill_(self.scratch_block * self.block_size)

    def metadata(self, size: int, num_splits: int) -> StaticDecodeMetadata:
        """The metadata of a padded batch of `size` rows: views of the buffers, the same tensors every step."""
        return StaticDecodeMetadata(
            query_lens=[1] * size, seq_lens=[self.max_seq_len] * size, slot_mapping=self.slot_mapping[:size],
            block_tables=self.block_tables[:size], block_size=self.block_size,
            seq_lens_tensor=self.seq_lens[:size], max_seq_len=self.max_seq_len, num_splits=num_splits,
        )
