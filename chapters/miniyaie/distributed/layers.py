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
        # Idea: which dimension of the weight is this rank's, and which part of the layer is not split at all?
        # Stuck? `miniyaie hint 7.2` prints hints, one level at a time.
        # TODO(Task 7.2): The layers that talk to the other ranks. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 2: The layers that talk to the other ranks — see book/src/ch07_tensor_parallel.md')

    # ANCHOR: row_parallel
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """What the unsplit layer gives for the whole input (x @ W.T + b), the same on every rank."""
        # Idea: what does each rank hold of the answer, and which part of the layer must be counted once?
        # Stuck? `miniyaie hint 7.2` prints hints, one level at a time.
        # TODO(Task 7.2): The layers that talk to the other ranks. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 2: The layers that talk to the other ranks — see book/src/ch07_tensor_parallel.md')
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
        # Idea: which rows of the whole table does this rank keep, and what shape is its weight then?
        # Stuck? `miniyaie hint 7.2` prints hints, one level at a time.
        # TODO(Task 7.2): The layers that talk to the other ranks. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 2: The layers that talk to the other ranks — see book/src/ch07_tensor_parallel.md')

    # ANCHOR: vocab_embedding
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Every id's full embedding row, [*ids.shape, hidden], the same on every rank.

        Ids may belong to any rank's range, and every rank takes part in the
        collective, even a rank whose range is empty.
        """
        # Idea: a rank can look up only the ids in its range: what should it contribute for the others?
        # Stuck? `miniyaie hint 7.2` prints hints, one level at a time.
        # TODO(Task 7.2): The layers that talk to the other ranks. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 2: The layers that talk to the other ranks — see book/src/ch07_tensor_parallel.md')
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
        # Idea: the head scores the same ids this rank embeds: which rows, what shape?
        # Stuck? `miniyaie hint 7.2` prints hints, one level at a time.
        # TODO(Task 7.2): The layers that talk to the other ranks. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 2: The layers that talk to the other ranks — see book/src/ch07_tensor_parallel.md')

    # ANCHOR: lm_head
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [rows, vocab_size], equal to the unsplit head's, the same on every rank.

        `group.all_gather_last_dim` requires one shape from every rank; the
        ranks' ranges (`shard_range`) may differ in length.
        """
        # Idea: an all-gather needs every rank to send the same shape, and a rank's range may be short.
        # Stuck? `miniyaie hint 7.2` prints hints, one level at a time.
        # TODO(Task 7.2): The layers that talk to the other ranks. Replace this line with your code.
        raise NotImplementedError('Chapter 7, Task 2: The layers that talk to the other ranks — see book/src/ch07_tensor_parallel.md')
    # ANCHOR_END: lm_head
