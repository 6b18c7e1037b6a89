"""Task 7.3: a rank's shard of a checkpoint, separate or merged q/k/v and gate/up, computes what the whole model computes.

The whole model is chapter 0's CausalLM with random weights, built here; its
state dict is the checkpoint, stored as it is or with q/k/v and gate/up
merged the way fused checkpoints store them ([q; k; v], [gate; up] by rows).
The ranks are threads (ThreadRanks); every rank's logits must equal the
whole model's. The checkpoint counts what each rank reads.
"""

from dataclasses import replace

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.distributed import TensorParallelSizeError, ThreadRanks, local_config, weight_slice
from miniyaie.distributed.shard_loader import rank_state_dict, shard_model
from miniyaie.model import AttentionMetadata, CausalLM, KVCache, ModelConfig
from miniyaie.model.loader import ModelLoadError

FAMILIES = {"llama": {}, "qwen2": dict(qkv_bias=True), "qwen3": dict(qk_norm=True)}


def config(heads=4, kv_heads=2, head_dim=4, intermediate=10, vocab=11, family="llama", tied=False) -> ModelConfig:
    return ModelConfig(family=family, vocab_size=vocab, hidden_size=8, intermediate_size=intermediate, num_layers=1,
                       num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, rms_norm_eps=1e-6,
                       max_position_embeddings=64, rope_theta=10000.0, tie_word_embeddings=tied,
                       **FAMILIES[family])


def whole_model(c: ModelConfig) -> CausalLM:
    torch.manual_seed(0)
    model = CausalLM(c).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn_like(param) * 0.5)
    return model


def checkpoint_tensors(model: CausalLM, merged: bool) -> dict[str, torch.Tensor]:
    """The model's state dict as a checkpoint stores it (q/k/v and gate/up merged by rows when `merged`)."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["model.rotary_emb.inv_freq"] = torch.ones(2)  # a buffer some checkpoints carry: not a parameter
    if model.config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()  # stored twice by some savers
    if merged:
        for i in range(model.config.num_layers):
            for kind in ("weight", "bias"):
                attn, mlp = f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
                if f"{attn}.q_proj.{kind}" in state:
                    state[f"{attn}.qkv_proj.{kind}"] = torch.cat([state.pop(f"{attn}.{p}_proj.{kind}") for p in "qkv"])
                if f"{mlp}.gate_proj.{kind}" in state:
                    state[f"{mlp}.gate_up_proj.{kind}"] = torch.cat([state.pop(f"{mlp}.{p}_proj.{kind}") for p in ("gate", "up")])
    return state


class MemoryCheckpoint:
    """A checkpoint in memory with Checkpoint's interface; `elements_read` counts what was read."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors, self.elements_read = tensors, 0

    def keys(self):
        return list(self.tensors)

    def shape(self, key):
        return tuple(self.tensors[key].shape)

    def read(self, key, dim=None, start=0, end=None):
        tensor = self.tensors[key] if dim is None else self.tensors[key].narrow(dim, start, (end if end is not None else self.tensors[key].shape[dim]) - start)
        self.elements_read += tensor.numel()
        return tensor.clone()


def logits_of(model: CausalLM, ids: list[int]) -> torch.Tensor:
    n = len(ids)
    cache = KVCache(model.config, n, torch.float32)
    meta = AttentionMetadata(query_lens=[n], seq_lens=[n], slot_mapping=torch.arange(n),
                             block_tables=torch.tensor([[0]]), block_size=n)
    return model.compute_logits(model(torch.tensor(ids), torch.arange(n), cache, meta))


@st.composite
def layouts(draw):
    """(config, tp): every head layout a size may split (KV heads dividing the ranks or divided by them)."""
    tp = draw(st.sampled_from([1, 2, 3, 4]))
    kv = draw(st.sampled_from([k for k in (1, 2, 3, 4, 6) if k % tp == 0 or tp % k == 0]))
    heads = kv * draw(st.integers(1, 3))
    while heads % tp:
        heads += kv
    return config(heads, kv, draw(st.sampled_from([2, 4])), draw(st.integers(1, 14)), draw(st.integers(2, 20)),
                  draw(st.sampled_from(sorted(FAMILIES))), draw(st.booleans())), tp


@pytest.mark.task("7.3")
@settings(max_examples=30)
@given(layout=layouts(), merged=st.booleans())
@example(layout=(config(4, 2), 2), merged=False).via("even split, separate q/k/v")
@example(layout=(config(4, 2, family="qwen2"), 2), merged=True).via("merged q/k/v with biases")
@example(layout=(config(4, 1), 2), merged=True).via("one KV head, replicated on both ranks, merged")
@example(layout=(config(4, 2, intermediate=5), 4), merged=True).via("two KV heads over four ranks; MLP 2+2+1+0")
@example(layout=(config(6, 3, intermediate=7, vocab=4, tied=True), 3), merged=True).via("uneven MLP, an empty vocabulary range, tied")
@example(layout=(config(9, 3, head_dim=2, intermediate=12, vocab=17, family="qwen3"), 3), merged=False).via("SmolLM2's heads at TP=3")
def test_the_sharded_model_computes_the_whole_models_logits(layout, merged):
    c, tp = layout
    model = whole_model(c)
    tensors = checkpoint_tensors(model, merged)
    ids = [i % c.vocab_size for i in (3, 0, 7, 1, 5)]
    want = logits_of(model, ids)
    reads = {}

    def rank(group):
        checkpoint = MemoryCheckpoint(tensors)
        sharded = shard_model(checkpoint, c, group)
        reads[group.rank] = (checkpoint.elements_read, sum(p.numel() for p in sharded.parameters()))
        return logits_of(sharded, ids)

    layout_name = "merged q/k/v and gate/up" if merged else "separate q/k/v and gate/up"
    for r, got in enumerate(ThreadRanks(tp, timeout_s=30).run(rank)):
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-4), (
            f"{c.num_heads} query / {c.num_kv_heads} KV heads, MLP {c.intermediate_size}, vocabulary {c.vocab_size} "
            f"over {tp} ranks ({layout_name}): rank {r}'s logits differ from the whole model's by "
            f"{(got - want).abs().max() if got.shape == want.shape else f'shape {tuple(got.shape)}'}")
    for r, (read, held) in reads.items():
        assert read <= held, (
            f"rank {r} read {read} checkpoint elements but holds {held}: read only the rank's slices "
            f"({layout_name}), never a whole split tensor")


@pytest.mark.task("7.3")
@given(layout=layouts(), merged=st.booleans())
@example(layout=(config(4, 1), 4), merged=True).via("one KV head, four ranks")
@example(layout=(config(6, 3, intermediate=7, vocab=4), 3), merged=True)
def test_each_parameter_is_its_slice_of_the_unmerged_tensor(layout, merged):
    c, tp = layout
    model = whole_model(c)
    whole = {k: v for k, v in model.state_dict().items()}
    tensors = checkpoint_tensors(model, merged)
    for rank in range(tp):
        state = rank_state_dict(MemoryCheckpoint(tensors), c, rank, tp)
        want_keys = set(whole) - ({"lm_head.weight"} if c.tie_word_embeddings else set())
        assert set(state) == want_keys, (
            f"rank {rank} ({'merged' if merged else 'separate'} layout): the state dict should have exactly the "
            f"model's parameter names; missing {sorted(want_keys - set(state))[:3]}, extra {sorted(set(state) - want_keys)[:3]}")
        for key, got in state.items():
            part = weight_slice(key, c, rank, tp)
            want = whole[key] if part is None else whole[key].narrow(part[0], part[1], part[2] - part[1])
            assert torch.equal(got, want), (
                f"rank {rank} of {tp}: {key} is not its slice {part} of the unmerged tensor "
                f"({'read from the merged tensor' if merged and ('_proj' in key) else 'separate layout'})")


@pytest.mark.task("7.3")
def test_a_merged_tensor_of_the_wrong_size_is_refused_naming_it():
    c = config(4, 2)
    tensors = checkpoint_tensors(whole_model(c), merged=True)
    key = "model.layers.0.self_attn.qkv_proj.weight"
    tensors[key] = torch.cat([tensors[key], torch.zeros(c.head_dim, c.hidden_size)])  # one KV head too many
    with pytest.raises(ModelLoadError) as caught:
        rank_state_dict(MemoryCheckpoint(tensors), c, 0, 2)
    message = str(caught.value)
    assert key in message and str(tensors[key].shape[0]) in message and str((4 + 2 * 2) * c.head_dim) in message, (
        f"a merged q/k/v with rows for another head layout must be refused naming the key, its rows "
        f"({tensors[key].shape[0]}) and the rows expected ({(4 + 2 * 2) * c.head_dim}); got {message!r}")


@pytest.mark.task("7.3")
@given(layout=layouts())
@example(layout=(config(4, 1), 2)).via("one KV head over two ranks: one replicated head each, not 0")
@example(layout=(config(4, 2, intermediate=90), 4)).via("MLP 23+23+23+21")
@example(layout=(config(4, 2, intermediate=5), 4)).via("MLP 2+2+1+0")
def test_the_local_config_has_the_ranks_heads_and_features(layout):
    c, tp = layout
    for rank in range(tp):
        local = local_config(c, rank, tp)
        _, q0, q1 = weight_slice("model.layers.0.self_attn.q_proj.weight", c, rank, tp)
        _, k0, k1 = weight_slice("model.layers.0.self_attn.k_proj.weight", c, rank, tp)
        _, m0, m1 = weight_slice("model.layers.0.mlp.up_proj.weight", c, rank, tp)
        got = (local.num_heads, local.num_kv_heads, local.intermediate_size)
        want = ((q1 - q0) // c.head_dim, (k1 - k0) // c.head_dim, m1 - m0)
        assert got == want, (
            f"{c.num_heads} query / {c.num_kv_heads} KV heads, MLP {c.intermediate_size}, rank {rank} of {tp}: "
            f"(heads, KV heads, MLP features) should be {want}, got {got}")
        assert replace(local, num_heads=c.num_heads, num_kv_heads=c.num_kv_heads,
                       intermediate_size=c.intermediate_size) == c, f"rank {rank}: only the three counts may change"


@pytest.mark.task("7.3")
@pytest.mark.parametrize("heads,kv,tp,words", [(3, 3, 2, "3 query heads"), (12, 6, 4, "6 KV heads")])
def test_a_size_that_does_not_split_the_heads_is_refused_before_anything_is_built(heads, kv, tp, words):
    c = config(heads, kv)
    with pytest.raises(TensorParallelSizeError) as caught:
        local_config(c, 0, tp)
    assert words in str(caught.value), f"{heads}/{kv} heads over {tp} ranks: the refusal should name the {words}, got {caught.value}"
    tensors = checkpoint_tensors(whole_model(c), merged=False)
    with pytest.raises(TensorParallelSizeError):
        ThreadRanks(tp, timeout_s=10).run(lambda group: shard_model(MemoryCheckpoint(tensors), c, group))


@pytest.mark.task("7.3")
@pytest.mark.parametrize("change,words", [
    ("extra", "model.layers.0.mlp.extra_proj.weight"),
    ("missing", "model.norm.weight"),
    ("shape", "model.layers.0.mlp.down_proj.weight"),
])
def test_a_checkpoint_that_does_not_fit_the_model_is_refused_naming_the_key(change, words):
    c = config(4, 2)
    tensors = checkpoint_tensors(whole_model(c), merged=False)
    if change == "extra":
        tensors[words] = torch.zeros(3, 8)
    elif change == "missing":
        del tensors[words]
    else:
        tensors[words] = torch.zeros(9, c.intermediate_size)  # one output row too many
    with pytest.raises(ModelLoadError) as caught:
        ThreadRanks(2, timeout_s=10).run(lambda group: shard_model(MemoryCheckpoint(tensors), c, group))
    assert words in str(caught.value), f"a checkpoint with {change} {words} must be refused naming it, got {caught.value}"
