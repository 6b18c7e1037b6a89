"""Megatron-style parallel layers: column split (no communication), row split (one all-reduce).

A block needs one all-reduce per half: QKV and gate/up are split by output
columns, so each rank computes its own heads / intermediate slice alone; o_proj
and down_proj are split by input rows, so each rank holds a partial sum that
one all-reduce completes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from miniyaie.distributed.process_group import TPGroup
from miniyaie.distributed.sharding import shard_range


class ColumnParallelLinear(torch.nn.Module):
    """y_local = x @ W_local.T: this rank's slice of the output features; no communication."""

    def __init__(self, weight_shard: torch.Tensor, bias_shard: torch.Tensor | None = None):
        super().__init__()
        self.weight = torch.nn.Parameter(weight_shard, requires_grad=False)
        self.bias = None if bias_shard is None else torch.nn.Parameter(bias_shard, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """Each rank multiplies its slice of the input features; the all-reduce sums the partials."""

    def __init__(self, weight_shard: torch.Tensor, group: TPGroup, bias: torch.Tensor | None = None):
        super().__init__()
        self.weight = torch.nn.Parameter(weight_shard, requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.group.all_reduce(F.linear(x, self.weight))
        # The bias is added once, after the sum, not once per rank.
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(torch.nn.Module):
    """Each rank holds a contiguous range of the vocabulary's rows.

    Ids outside the range look up row 0 and are zeroed, so after the all-reduce
    every id's vector comes from exactly the one rank that owns it.
    """

    def __init__(self, weight_shard: torch.Tensor, vocab_size: int, group: TPGroup):
        super().__init__()
        self.start, self.end = shard_range(vocab_size, group.rank, group.world_size)
        if weight_shard.shape[0] != self.end - self.start:
            raise ValueError(f"embedding shard has {weight_shard.shape[0]} rows, expected {self.end - self.start}")
        self.weight = torch.nn.Parameter(weight_shard, requires_grad=False)
        self.group = group

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mine = (ids >= self.start) & (ids < self.end)
        local = torch.where(mine, ids - self.start, torch.zeros_like(ids))
        out = F.embedding(local, self.weight) * mine.unsqueeze(-1).to(self.weight.dtype)
        return self.group.all_reduce(out)


class ParallelLMHead(torch.nn.Module):
    """Logits for this rank's vocabulary range, all-gathered so every rank has the full row.

    All-gather (not gather to rank 0) because every rank then samples the same
    token from the same logits without a second broadcast; the cost is one
    vocab-sized row per sequence per step, small next to the weights.
    """

    def __init__(self, weight_shard: torch.Tensor, vocab_size: int, group: TPGroup):
        super().__init__()
        self.vocab_size = vocab_size
        self.weight = torch.nn.Parameter(weight_shard, requires_grad=False)
        self.group = group

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        start, end = shard_range(self.vocab_size, self.group.rank, self.group.world_size)
        per_rank = -(-self.vocab_size // self.group.world_size)
        local = F.linear(hidden, self.weight)
        # Pad the last rank's (shorter) slice so every rank sends the same shape.
        local = F.pad(local, (0, per_rank - (end - start)))
        return self.group.all_gather_last_dim(local)[..., : self.vocab_size]
