"""Task 7.2: the layers that talk to the other ranks compute what one unsplit layer computes.

The ranks are threads (ThreadRanks): the collectives sum and concatenate in
rank order, like gloo's. Every weight and bias is random, so an answer that
adds the bias on every rank, forgets to mask foreign ids or drops the last
rank's short slice differs from the unsplit layer. A vocabulary of 4 over 3
ranks leaves the last rank an empty range: it must still take part.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.distributed import CollectiveMismatchError, ParallelLMHead, RowParallelLinear, ThreadRanks, VocabParallelEmbedding, shard_range


def on_ranks(tp: int, fn):
    return ThreadRanks(tp, timeout_s=20).run(fn)


@pytest.mark.task("7.2")
@given(tp=st.sampled_from([1, 2, 3]), in_features=st.integers(3, 24), rows=st.integers(1, 5), bias=st.booleans())
@example(tp=2, in_features=8, rows=3, bias=True)
def test_row_parallel_linear_equals_the_whole_layer(tp, in_features, rows, bias):
    torch.manual_seed(0)
    weight, b, x = torch.randn(6, in_features), torch.randn(6), torch.randn(rows, in_features)

    def rank(group):
        start, end = shard_range(in_features, group.rank, tp)
        layer = RowParallelLinear(end - start, 6, bias, group)
        assert layer.weight.shape == (6, end - start), (
            f"rank {group.rank}: the weight should be [out, local in] = {(6, end - start)}, got {tuple(layer.weight.shape)}")
        assert (layer.bias is not None) == bias and not any(p.requires_grad for p in layer.parameters()), (
            f"rank {group.rank}: a whole bias only when asked for (bias={bias}, got {layer.bias}), and no gradients")
        layer.weight.data.copy_(weight[:, start:end])
        if bias:
            layer.bias.data.copy_(b)
        return layer(x[:, start:end])

    want = F.linear(x, weight, b if bias else None)
    for r, got in enumerate(on_ranks(tp, rank)):
        assert torch.allclose(got, want, atol=1e-5), (
            f"rank {r} of {tp}: the row-parallel output differs from the whole layer by "
            f"{(got - want).abs().max():.3g}" + (" (is the bias added on every rank, before the sum?)" if bias else ""))


@pytest.mark.task("7.2")
@given(tp=st.sampled_from([1, 2, 3]), vocab=st.integers(3, 40), data=st.data())
@example(tp=2, vocab=7, data=None).via("uneven vocabulary, ids of both ranks")
@example(tp=3, vocab=4, data=None).via("rank 2's range of the vocabulary is empty")
def test_vocab_parallel_embedding_equals_the_whole_table(tp, vocab, data):
    torch.manual_seed(1)
    table = torch.randn(vocab, 5)
    if data is None:
        ids = torch.tensor([[0, vocab - 1, 3], [vocab // 2, 1, 2]])
    else:
        ids = torch.tensor(data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=12)))

    def rank(group):
        layer = VocabParallelEmbedding(vocab, 5, group)
        start, end = shard_range(vocab, group.rank, tp)
        assert (layer.start, layer.end) == (start, end) and layer.weight.shape == (end - start, 5), (
            f"rank {group.rank}: the embedding should hold rows {start}..{end} of the vocabulary, "
            f"got start/end {layer.start}..{layer.end} and a weight of {tuple(layer.weight.shape)}")
        assert not layer.weight.requires_grad, "the embedding's weight is inference-only: no gradient"
        layer.weight.data.copy_(table[start:end])
        return layer(ids)

    want = F.embedding(ids, table)
    for r, got in enumerate(on_ranks(tp, rank)):
        assert got.shape == want.shape, f"rank {r}: embedding of ids {tuple(ids.shape)} should be {tuple(want.shape)}, got {tuple(got.shape)}"
        wrong = (got - want).abs().amax(-1) > 1e-5
        assert not wrong.any(), f"rank {r} of {tp}: wrong vectors for ids {ids[wrong].tolist()} (vocabulary {vocab})"


@pytest.mark.task("7.2")
@given(tp=st.sampled_from([1, 2, 3, 4]), vocab=st.integers(4, 50), rows=st.integers(1, 4))
@example(tp=2, vocab=321, rows=2).via("a vocabulary that does not divide by 2")
@example(tp=4, vocab=8, rows=1)
@example(tp=3, vocab=4, rows=2).via("rank 2's range of the vocabulary is empty")
def test_lm_head_logits_equal_the_whole_head_on_every_rank(tp, vocab, rows):
    torch.manual_seed(2)
    weight, hidden = torch.randn(vocab, 6), torch.randn(rows, 6)

    def rank(group):
        head = ParallelLMHead(vocab, 6, group)
        start, end = shard_range(vocab, group.rank, tp)
        assert head.weight.shape == (end - start, 6), (
            f"rank {group.rank}: the head should hold rows {start}..{end}, got a weight of {tuple(head.weight.shape)}")
        assert not head.weight.requires_grad, "the head's weight is inference-only: no gradient"
        head.weight.data.copy_(weight[start:end])
        return head(hidden)

    want = F.linear(hidden, weight)
    for r, got in enumerate(on_ranks(tp, rank)):
        assert got.shape == want.shape, f"rank {r} of {tp}: logits should be {tuple(want.shape)} (the whole vocabulary), got {tuple(got.shape)}"
        assert torch.allclose(got, want, atol=1e-5), f"rank {r} of {tp}: logits out of vocabulary order or wrong (vocabulary {vocab})"


@pytest.mark.ungraded
def test_ranks_in_different_collectives_fail_at_once_naming_both():
    """Provided machinery (ThreadRanks): a rank that broadcasts while another all-reduces is an error, not a mix-up."""

    def rank(group):
        if group.rank == 0:
            return group.broadcast_object("a step")
        return group.all_reduce(torch.ones(2))

    with pytest.raises(CollectiveMismatchError) as caught:
        on_ranks(2, rank)
    message = str(caught.value)
    assert "rank 0 in broadcast_object" in message and "rank 1 in all_reduce" in message, (
        f"the error should name which collective each rank called, got {message!r}")
