"""Task 7.1: which sizes a model allows and which slice of each weight a rank owns (pure functions: no ranks)."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.distributed import (
    TensorParallelSizeError, check_tensor_parallel_size, kv_head_range, weight_slice,
)
from miniyaie.model import ModelConfig


def config(heads=4, kv_heads=2, head_dim=8, intermediate=90, vocab=321) -> ModelConfig:
    return ModelConfig(family="llama", vocab_size=vocab, hidden_size=32, intermediate_size=intermediate, num_layers=2,
                       num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, rms_norm_eps=1e-6,
                       max_position_embeddings=64, rope_theta=10000.0)


@st.composite
def splits(draw):
    """(config, tp size) with every legal head layout: KV heads dividing the ranks or divided by them."""
    tp = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    kv = draw(st.sampled_from([k for k in (1, 2, 3, 4, 6, 8, 12, 16) if k % tp == 0 or tp % k == 0]))
    group = draw(st.integers(1, 4))  # query heads per KV head
    heads = kv * group
    if heads % tp:
        heads *= tp // __import__("math").gcd(heads, tp)
        group = heads // kv
    return config(heads, kv, draw(st.sampled_from([4, 8, 24])), draw(st.integers(tp, 200)), draw(st.integers(tp, 500))), tp


def pieces(name: str, c: ModelConfig, tp: int):
    return [weight_slice(name, c, rank, tp) for rank in range(tp)]


def covers_once(parts, size: int, dim: int, what: str):
    assert all(p is not None and p[0] == dim for p in parts), f"{what}: every rank must split dim {dim}, got {parts}"
    position = 0
    for rank, (_, start, end) in enumerate(parts):
        assert start == position, f"{what}: rank {rank} starts at {start}, not where rank {rank - 1} ended ({position}): {parts}"
        assert end >= start, f"{what}: rank {rank} has an empty-or-negative range {start}..{end}"
        position = end
    assert position == size, f"{what}: the ranks' ranges end at {position}, the tensor has {size} there: {parts}"


def ceil_long_until_the_end(parts, size: int, tp: int, what: str):
    """shard_range's layout: every range ceil(size / tp) long, but the last non-empty one may be shorter and the rest empty."""
    per = -(-size // tp)
    expected = [(min(size, r * per), min(size, (r + 1) * per)) for r in range(tp)]
    assert [(s, e) for _, s, e in parts] == expected, (
        f"{what}: {size} rows over {tp} ranks are ranges of ceil({size}/{tp}) = {per} rows, only the last non-empty "
        f"one shorter and the ranks after it empty (size 4 over 3 ranks: (0, 2), (2, 4), (4, 4)); got {parts}")


@pytest.mark.task("7.1")
@given(splits())
@example((config(4, 2), 2)).via("even heads, uneven vocabulary")
@example((config(9, 3, intermediate=1536, vocab=49152), 3)).via("SmolLM2 at TP=3")
@example((config(4, 2, intermediate=5, vocab=4), 4)).via("MLP 2+2+1+0, vocabulary 1+1+1+1")
@example((config(6, 3, intermediate=7, vocab=4), 3)).via("vocabulary 2+2+0: the last rank's range is empty")
def test_query_mlp_and_vocabulary_rows_are_split_once_in_rank_order(split):
    c, tp = split
    for layer in ("q_proj.weight", "q_proj.bias"):
        covers_once(pieces(f"model.layers.0.self_attn.{layer}", c, tp), c.num_heads * c.head_dim, 0, layer)
    for layer in ("gate_proj.weight", "up_proj.weight", "gate_proj.bias"):
        covers_once(pieces(f"model.layers.1.mlp.{layer}", c, tp), c.intermediate_size, 0, layer)
    covers_once(pieces("model.embed_tokens.weight", c, tp), c.vocab_size, 0, "embed_tokens")
    covers_once(pieces("lm_head.weight", c, tp), c.vocab_size, 0, "lm_head")
    ceil_long_until_the_end(pieces("model.layers.1.mlp.up_proj.weight", c, tp), c.intermediate_size, tp, "up_proj")
    ceil_long_until_the_end(pieces("lm_head.weight", c, tp), c.vocab_size, tp, "lm_head")


@pytest.mark.task("7.1")
@given(splits())
@example((config(4, 2), 2))
def test_row_parallel_layers_take_the_columns_their_input_rows_came_from(split):
    c, tp = split
    q = pieces("model.layers.0.self_attn.q_proj.weight", c, tp)
    o = pieces("model.layers.0.self_attn.o_proj.weight", c, tp)
    assert o == [(1, s, e) for _, s, e in q], f"o_proj must keep the columns of the rank's query heads (dim 1): q {q}, o {o}"
    gate = pieces("model.layers.0.mlp.gate_proj.weight", c, tp)
    down = pieces("model.layers.0.mlp.down_proj.weight", c, tp)
    assert down == [(1, s, e) for _, s, e in gate], f"down_proj must keep the columns of the rank's MLP slice: {gate} vs {down}"


@pytest.mark.task("7.1")
@given(splits())
@example((config(4, 1), 2)).via("one KV head, replicated on both ranks")
@example((config(4, 2), 4)).via("two KV heads over four ranks")
@example((config(8, 8), 2)).via("multi-head attention")
def test_each_rank_holds_exactly_the_kv_heads_its_query_heads_read(split):
    c, tp = split
    group = c.num_heads // c.num_kv_heads
    for rank in range(tp):
        first, last = rank * c.num_heads // tp, (rank + 1) * c.num_heads // tp
        needed = sorted({h // group for h in range(first, last)})
        start, end = kv_head_range(c.num_heads, c.num_kv_heads, rank, tp)
        assert list(range(start, end)) == needed, (
            f"{c.num_heads} query / {c.num_kv_heads} KV heads over {tp} ranks: rank {rank}'s query heads "
            f"{first}..{last - 1} read KV heads {needed}, kv_head_range gave {start}..{end - 1}")
        for layer in ("k_proj.weight", "v_proj.weight", "k_proj.bias"):
            got = weight_slice(f"model.layers.0.self_attn.{layer}", c, rank, tp)
            want = (0, needed[0] * c.head_dim, (needed[-1] + 1) * c.head_dim)
            assert got == want, f"{layer} on rank {rank}: expected rows {want} (its KV heads {needed}), got {got}"


@pytest.mark.task("7.1")
def test_norms_and_the_biases_added_after_the_sum_are_whole():
    c = config(4, 2)
    for name in ("model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
                 "model.norm.weight", "model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.o_proj.bias",
                 "model.layers.0.mlp.down_proj.bias"):
        assert weight_slice(name, c, 1, 2) is None, (
            f"{name} must be whole on every rank (None): it is applied to the full hidden state, "
            f"or added once after the all-reduce")


@pytest.mark.task("7.1")
@given(heads_per_kv=st.integers(1, 6), kv=st.integers(1, 12), tp=st.integers(1, 16))
@example(heads_per_kv=3, kv=3, tp=3).via("SmolLM2 at TP=3: works")
@example(heads_per_kv=3, kv=3, tp=2).via("SmolLM2 at TP=2: refused")
@example(heads_per_kv=2, kv=2, tp=4).via("two KV heads, each on two of four ranks")
@example(heads_per_kv=2, kv=4, tp=4).via("one KV head per rank")
@example(heads_per_kv=2, kv=6, tp=4).via("12 query heads split in 4, 6 KV heads cannot be")
def test_a_size_is_refused_exactly_when_it_does_not_split_the_heads(heads_per_kv, kv, tp):
    heads = heads_per_kv * kv
    query_ok = heads % tp == 0
    kv_ok = kv % tp == 0 or tp % kv == 0  # an even share of KV heads, or whole copies of one
    what = f"{heads} query heads, {kv} KV heads, tensor-parallel size {tp}"
    try:
        check_tensor_parallel_size(heads, kv, tp)
        refused = None
    except TensorParallelSizeError as exc:
        refused = str(exc)
    if query_ok and kv_ok:
        assert refused is None, f"{what} splits evenly and must be accepted, got the refusal {refused!r}"
    elif not query_ok:
        assert refused == f"tensor-parallel size {tp} does not divide the model's {heads} query heads", (
            f"{what}: the query heads do not split, so that is the one-line reason; got {refused!r}")
    else:
        assert refused is not None and "\n" not in refused and f"{kv} KV heads" in refused, (
            f"{what}: the query heads split but the KV heads neither divide nor replicate evenly; "
            f"refuse in one line naming the {kv} KV heads, got {refused!r}")


@pytest.mark.task("7.1")
@pytest.mark.parametrize("size", [0, -2, True, 2.0, "2"])
def test_a_size_that_is_no_whole_number_of_ranks_is_refused(size):
    with pytest.raises(TensorParallelSizeError) as caught:
        check_tensor_parallel_size(4, 2, size)
    assert str(caught.value) == f"tensor-parallel size must be a whole number >= 1, got {size!r}", (
        f"size {size!r}: expected the one-line refusal naming it, got {caught.value}")
