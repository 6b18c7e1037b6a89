"""The layers of a sharded model that talk to the other ranks.

Column-parallel layers (q/k/v, gate/up) need nothing new: an ordinary
nn.Linear holding this rank's rows of the weight computes this rank's heads
or features alone. The three layers here are the ones whose results need
the other ranks: a row-parallel linear (a partial sum, completed by one
all-reduce), the vocab-parallel embedding (each id's vector lives on one
rank) and the LM head (each rank scores its part of the vocabulary).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from miniyaie.distributed.process_group import TPGroup
from miniyaie.distributed.sharding import shard_range


class RowParallelLinear(nn.Module):
    """y = x @ W.T + b where this rank holds W's columns for its slice of x's features.

    The weight is [out_features, in_features / N]; x is this rank's slice of
    the input (the output of the column-parallel layer before it).
    """

    def __init__(self, local_in_features: int, out_features: int, bias: bool, group: TPGroup):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, local_in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None
        self.group = group

    # ANCHOR: row_parallel
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The full y on every rank: the sum over ranks of x_r @ W_r.T, plus the bias once."""
        # Nudge: each rank holds one term of a sum; the bias belongs to the sum, not to the terms.
        # Hint 1: x @ W.T splits along the shared dimension: the sum over ranks of each rank's
        #   slice of x times its columns of W. One all-reduce (a sum) completes it on every rank.
        #   A bias added before the sum would be counted N times.
        # Hint 2: Multiply x by this rank's weight without the bias (F.linear), sum the result over
        #   the ranks with self.group.all_reduce, then add the bias if there is one.
        # Hint 3:
        #   partial = F.linear(x, self.weight)
        #   y = self.group.all_reduce(partial)
        #   return y + self.bias if self.bias is not None else y
        # BEGIN SOLUTION 7.2: Row-parallel linear and vocab-parallel embedding
        y = self.group.all_reduce(F.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
        # END SOLUTION
    # ANCHOR_END: row_parallel


class VocabParallelEmbedding(nn.Module):
    """Each rank holds the embedding rows of one range of the vocabulary (`shard_range`)."""

    def __init__(self, vocab_size: int, hidden_size: int, group: TPGroup):
        super().__init__()
        self.start, self.end = shard_range(vocab_size, group.rank, group.world_size)
        self.weight = nn.Parameter(torch.empty(self.end - self.start, hidden_size), requires_grad=False)
        self.group = group

    # ANCHOR: vocab_embedding
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Every id's full embedding row on every rank, [*ids.shape, hidden]."""
        # Nudge: a rank can look up only the ids in its range; make every other id contribute nothing.
        # Hint 1: Id i's row lives on exactly one rank. If every rank outputs that row for its own
        #   ids and zeros for the others, the all-reduce (a sum) puts together the full answer.
        #   Ids outside the range must not index out of bounds on this rank's shard.
        # Hint 2: mine = ids in [self.start, self.end); look up ids - self.start where mine and
        #   row 0 elsewhere (any valid row); zero the rows that are not mine; all-reduce.
        # Hint 3:
        #   mine = (ids >= start) & (ids < end)
        #   rows = F.embedding(where(mine, ids - start, 0), self.weight)
        #   return all_reduce(rows * mine[..., None])
        # BEGIN SOLUTION 7.2: Row-parallel linear and vocab-parallel embedding
        mine = (ids >= self.start) & (ids < self.end)
        local = torch.where(mine, ids - self.start, torch.zeros_like(ids))
        rows = F.embedding(local, self.weight) * mine.unsqueeze(-1).to(self.weight.dtype)
        return self.group.all_reduce(rows)
        # END SOLUTION
    # ANCHOR_END: vocab_embedding


class ParallelLMHead(nn.Module):
    """Scores this rank's range of the vocabulary; the logits are all-gathered so every rank has them all.

    All-gather rather than gather-to-rank-0: the logits of one step are small
    (a row of vocab_size floats per sampled sequence), and with them on every
    rank a rank could sample without another message. Only rank 0 samples here.
    """

    def __init__(self, vocab_size: int, hidden_size: int, group: TPGroup):
        super().__init__()
        self.vocab_size = vocab_size
        start, end = shard_range(vocab_size, group.rank, group.world_size)
        self.weight = nn.Parameter(torch.empty(end - start, hidden_size), requires_grad=False)
        self.group = group

    # ANCHOR: lm_head
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [rows, vocab_size], the same on every rank, columns in vocabulary order."""
        # Nudge: an all-gather needs every rank to send the same shape, and the last rank's range may be short.
        # Hint 1: This rank's logits are hidden @ weight.T: the columns of its vocabulary range.
        #   Gathered in rank order along the last dimension they are the full row, because the
        #   ranges are in rank order. All ranks must send tensors of one shape: ceil(V / N)
        #   columns; the last rank has fewer when V does not divide by N.
        # Hint 2: Compute the local logits; pad their last dimension with zeros up to
        #   ceil(vocab_size / world_size) (F.pad); all-gather along the last dimension
        #   (self.group.all_gather_last_dim); keep the first vocab_size columns.
        # Hint 3:
        #   per_rank = ceil(vocab_size / world_size)
        #   local = F.linear(hidden, self.weight)
        #   local = F.pad(local, (0, per_rank - local.shape[-1]))
        #   return self.group.all_gather_last_dim(local)[..., :vocab_size]
        # BEGIN SOLUTION 7.3: The LM head, all-gathered
        per_rank = -(-self.vocab_size // self.group.world_size)
        local = F.linear(hidden, self.weight)
        local = F.pad(local, (0, per_rank - local.shape[-1]))
        return self.group.all_gather_last_dim(local)[..., : self.vocab_size]
        # END SOLUTION
    # ANCHOR_END: lm_head
