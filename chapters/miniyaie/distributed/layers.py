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
        # Idea: each rank holds one term of a sum; the bias belongs to the sum, not to the terms.
        # Stuck? `miniyaie hint 7.2` prints hints, one level at a time.
        # TODO(Task 7.2): Row-parallel linear and vocab-parallel embedding. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 2: Row-parallel linear and vocab-parallel embedding — see book/src/ch07_tensor_parallel.md')
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
        # Idea: a rank can look up only the ids in its range; make every other id contribute nothing.
        # Stuck? `miniyaie hint 7.2` prints hints, one level at a time.
        # TODO(Task 7.2): Row-parallel linear and vocab-parallel embedding. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 2: Row-parallel linear and vocab-parallel embedding — see book/src/ch07_tensor_parallel.md')
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
        # Idea: an all-gather needs every rank to send the same shape, and the last rank's range may be short.
        # Stuck? `miniyaie hint 7.3` prints hints, one level at a time.
        # TODO(Task 7.3): The LM head, all-gathered. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 3: The LM head, all-gathered — see book/src/ch07_tensor_parallel.md')
    # ANCHOR_END: lm_head
