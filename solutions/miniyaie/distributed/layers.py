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
    """A linear layer split by input features: this rank holds W's columns for its slice of x.

    The weight is [out_features, local_in_features]; x is this rank's slice
    of the input (the output of the column-parallel layer before it). The
    bias, if any, is whole on every rank, and None without one. Weight and
    bias are Parameters without gradient (inference only).
    """

    def __init__(self, local_in_features: int, out_features: int, bias: bool, group: TPGroup):
        super().__init__()
        self.group = group
        # Nudge: which dimension of the weight is this rank's, and which part of the layer is not split at all?
        # Hint 1: The rank holds the columns of its input features: all output rows, its inputs.
        #   The bias belongs to the whole output, so it is whole on every rank.
        # Hint 2: An uninitialised weight of out_features by local_in_features, and a bias of
        #   out_features when asked for (else None); both Parameters with requires_grad=False.
        # Hint 3:
        #   self.weight = nn.Parameter(torch.empty(out, local_in), requires_grad=False)
        #   self.bias = nn.Parameter(torch.empty(out), requires_grad=False) if bias else None
        # BEGIN SOLUTION 7.2: The layers that talk to the other ranks
        self.weight = nn.Parameter(torch.empty(out_features, local_in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None
        # END SOLUTION

    # ANCHOR: row_parallel
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """What the unsplit layer gives for the whole input (x @ W.T + b), the same on every rank."""
        # Nudge: what does each rank hold of the answer, and which part of the layer must be counted once?
        # Hint 1: x @ W.T splits along the shared dimension: the answer is the sum over ranks of
        #   each rank's slice of x times its columns of W. One all-reduce (a sum) completes it on
        #   every rank. A bias added before the sum would be counted N times.
        # Hint 2: Multiply x by this rank's weight without the bias (F.linear), sum the result over
        #   the ranks with self.group.all_reduce, then add the bias if there is one.
        # Hint 3:
        #   partial = F.linear(x, self.weight)
        #   y = self.group.all_reduce(partial)
        #   return y + self.bias if self.bias is not None else y
        # BEGIN SOLUTION 7.2: The layers that talk to the other ranks
        y = self.group.all_reduce(F.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
        # END SOLUTION
    # ANCHOR_END: row_parallel


class VocabParallelEmbedding(nn.Module):
    """Each rank holds the embedding rows of one range of the vocabulary, [self.start, self.end).

    The ranges are `shard_range`'s: a rank's range may be short, or empty
    (a vocabulary of 4 over 3 ranks gives the last rank none). The weight,
    [end - start, hidden_size], is a Parameter without gradient (inference
    only), like every weight of the model.
    """

    def __init__(self, vocab_size: int, hidden_size: int, group: TPGroup):
        super().__init__()
        self.group = group
        # Nudge: which rows of the whole table does this rank keep, and what shape is its weight then?
        # Hint 1: The rank's range of ids is shard_range's; its weight holds exactly those rows.
        # Hint 2: Set self.start, self.end from shard_range(vocab_size, rank, world_size) and an
        #   uninitialised weight of (end - start) rows by hidden_size (a Parameter, no gradient).
        # Hint 3:
        #   self.start, self.end = shard_range(vocab_size, group.rank, group.world_size)
        #   self.weight = nn.Parameter(torch.empty(self.end - self.start, hidden_size), requires_grad=False)
        # BEGIN SOLUTION 7.2: The layers that talk to the other ranks
        self.start, self.end = shard_range(vocab_size, group.rank, group.world_size)
        self.weight = nn.Parameter(torch.empty(self.end - self.start, hidden_size), requires_grad=False)
        # END SOLUTION

    # ANCHOR: vocab_embedding
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Every id's full embedding row, [*ids.shape, hidden], the same on every rank.

        Ids may belong to any rank's range, and every rank takes part in the
        collective, even a rank whose range is empty.
        """
        # Nudge: a rank can look up only the ids in its range: what should it contribute for the others?
        # Hint 1: Id i's row lives on exactly one rank. If every rank outputs that row for its own
        #   ids and zeros for the others, the all-reduce (a sum) puts together the full answer.
        #   A foreign id must never index this rank's shard: it may be out of bounds, and a rank
        #   whose range is empty has no row at all to look up.
        # Hint 2: Start from zeros of the output's shape. Find the ids in [self.start, self.end);
        #   write the rows weight[id - self.start] for those ids only (boolean-mask indexing
        #   works with no id selected, and with an empty weight); all-reduce.
        # Hint 3:
        #   mine = (ids >= start) & (ids < end)
        #   out = zeros(*ids.shape, hidden)
        #   out[mine] = weight[ids[mine] - start]
        #   return all_reduce(out)
        # BEGIN SOLUTION 7.2: The layers that talk to the other ranks
        mine = (ids >= self.start) & (ids < self.end)
        out = self.weight.new_zeros(*ids.shape, self.weight.shape[1])
        out[mine] = self.weight[ids[mine] - self.start]
        return self.group.all_reduce(out)
        # END SOLUTION
    # ANCHOR_END: vocab_embedding


class ParallelLMHead(nn.Module):
    """Scores this rank's range of the vocabulary; every rank ends with the logits of the whole vocabulary.

    All-gather rather than gather-to-rank-0: the logits of one step are small
    (a row of vocab_size floats per sampled sequence), and with them on every
    rank a rank could sample without another message. Only rank 0 samples here.
    The weight holds the rows of this rank's vocabulary range (`shard_range`),
    a Parameter without gradient (inference only).
    """

    def __init__(self, vocab_size: int, hidden_size: int, group: TPGroup):
        super().__init__()
        self.vocab_size = vocab_size
        self.group = group
        # Nudge: the head scores the same ids this rank embeds: which rows, what shape?
        # Hint 1: The head's rows are the vocabulary range shard_range gives this rank.
        # Hint 2: An uninitialised weight of (end - start) rows by hidden_size, no gradient.
        # Hint 3:
        #   start, end = shard_range(vocab_size, group.rank, group.world_size)
        #   self.weight = nn.Parameter(torch.empty(end - start, hidden_size), requires_grad=False)
        # BEGIN SOLUTION 7.2: The layers that talk to the other ranks
        start, end = shard_range(vocab_size, group.rank, group.world_size)
        self.weight = nn.Parameter(torch.empty(end - start, hidden_size), requires_grad=False)
        # END SOLUTION

    # ANCHOR: lm_head
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [rows, vocab_size], equal to the unsplit head's, the same on every rank.

        `group.all_gather_last_dim` requires one shape from every rank; the
        ranks' ranges (`shard_range`) may differ in length.
        """
        # Nudge: an all-gather needs every rank to send the same shape, and a rank's range may be short.
        # Hint 1: This rank's logits are hidden @ weight.T: the columns of its vocabulary range.
        #   Gathered in rank order along the last dimension they are the full row, because the
        #   ranges are in rank order. All ranks must send tensors of one shape: ceil(V / N)
        #   columns; a range shorter than that (the last ones when N does not divide V) is
        #   padded, and the padding cut off after the gather.
        # Hint 2: Compute the local logits; pad their last dimension with zeros up to
        #   ceil(vocab_size / world_size) (F.pad); all-gather along the last dimension
        #   (self.group.all_gather_last_dim); keep the first vocab_size columns.
        # Hint 3:
        #   per_rank = ceil(vocab_size / world_size)
        #   local = F.linear(hidden, self.weight)
        #   local = F.pad(local, (0, per_rank - local.shape[-1]))
        #   return self.group.all_gather_last_dim(local)[..., :vocab_size]
        # BEGIN SOLUTION 7.2: The layers that talk to the other ranks
        per_rank = -(-self.vocab_size // self.group.world_size)
        local = F.linear(hidden, self.weight)
        local = F.pad(local, (0, per_rank - local.shape[-1]))
        return self.group.all_gather_last_dim(local)[..., : self.vocab_size]
        # END SOLUTION
    # ANCHOR_END: lm_head
