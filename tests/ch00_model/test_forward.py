"""Task 0.3: the decoder's modules and its forward over the KV cache, against transformers' logits.

The model's attention here is the provided batched backend (miniyaie.backends), not the one of
Task 0.4, so that this task is graded on its own: the forward must write and read the
cache only through the backend, the metadata and the positions it is given.
"""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tiny_models import CONFIGS, save_tiny_model

from miniyaie.backends.batched_attention import BatchedTorchAttentionBackend
from miniyaie.model import AttentionMetadata, CausalLM, KVCache, LayerOps, load_model
from miniyaie.model.loader import read_config

_MODELS: dict = {}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """kind -> (our model on the provided backend, transformers' model), built once per module."""

    def get(kind):
        if kind not in _MODELS:
            folder = tmp_path_factory.mktemp(kind)
            hf_model = save_tiny_model(kind, folder, random_norms=True)  # each norm's weight matters
            ours = load_model(folder)
            ours.backend = BatchedTorchAttentionBackend()
            _MODELS[kind] = (ours, hf_model, folder)
        return _MODELS[kind]

    yield get
    _MODELS.clear()


def hf_logits(hf_model, tokens):
    with torch.no_grad():
        return hf_model(torch.tensor([tokens])).logits[0].float()


def step(model, cache, seqs, chunks, block_size):
    """One packed step: chunks[i] = (start, end) of sequence i's tokens to run; seq i owns block blocks[i]."""
    ids, positions, slots = [], [], []
    for (tokens, block), (start, end) in zip(seqs, chunks):
        ids += tokens[start:end]
        positions += range(start, end)
        slots += [block * block_size + p for p in range(start, end)]
    meta = AttentionMetadata(
        query_lens=[end - start for start, end in chunks], seq_lens=[end for _, end in chunks],
        slot_mapping=torch.tensor(slots), block_tables=torch.tensor([[block] for _, block in seqs]), block_size=block_size,
    )
    hidden = model(torch.tensor(ids), torch.tensor(positions), cache, meta)
    assert hidden.shape == (len(ids), model.config.hidden_size), "forward returns one hidden row per token of the step"
    return model.compute_logits(hidden)


@pytest.mark.task("0.3")
@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_modules_load_the_checkpoint_as_it_is(models, kind):
    """Every tensor of the checkpoint has a parameter of its name and shape, and nothing else is left over."""
    ours, hf_model, folder = models(kind)
    fresh = CausalLM(read_config(folder))
    theirs = {name: tuple(t.shape) for name, t in hf_model.state_dict().items() if not name.endswith("rotary_emb.inv_freq")}
    mine = {name: tuple(t.shape) for name, t in fresh.state_dict().items()}
    assert mine == theirs, (
        f"parameters differ from the checkpoint's: missing {sorted(set(theirs) - set(mine))[:4]}, "
        f"extra {sorted(set(mine) - set(theirs))[:4]}, other shape "
        f"{[(n, mine[n], theirs[n]) for n in sorted(set(mine) & set(theirs)) if mine[n] != theirs[n]][:3]}"
    )
    if fresh.config.tie_word_embeddings:
        assert fresh.lm_head.weight is fresh.model.embed_tokens.weight, "a tied lm_head shares the embedding's Parameter"
        assert ours.lm_head.weight.data_ptr() == ours.model.embed_tokens.weight.data_ptr()
    else:
        assert fresh.lm_head.weight is not fresh.model.embed_tokens.weight, "an untied lm_head has its own weight"
    assert all(isinstance(p, torch.nn.Parameter) for p in fresh.parameters())
    assert fresh.model.layers[0].input_layernorm.weight.eq(1).all(), "an RMSNorm weight starts at ones"


@pytest.mark.task("0.3")
@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_prefill_logits_match_transformers(models, kind):
    """Two prompts prefilled in one packed step give, row for row, transformers' logits of each prompt alone."""
    model, hf_model, _ = models(kind)
    g = torch.Generator().manual_seed(3)
    seqs = [(torch.randint(0, 320, (n,), generator=g).tolist(), block) for n, block in ((9, 1), (5, 0))]
    cache = KVCache(model.config, 2 * 16, torch.float32)
    logits = step(model, cache, seqs, [(0, 9), (0, 5)], 16)
    assert logits.dtype == torch.float32 and logits.shape == (14, model.config.vocab_size), "logits: float32 [rows, vocab]"
    torch.testing.assert_close(logits[:9], hf_logits(hf_model, seqs[0][0]), rtol=1e-4, atol=1e-4,
                               msg=lambda m: f"first prompt's logits differ from transformers': {m}")
    torch.testing.assert_close(logits[9:], hf_logits(hf_model, seqs[1][0]), rtol=1e-4, atol=1e-4,
                               msg=lambda m: f"second prompt's logits (packed after the first) differ: {m}")


@pytest.mark.task("0.3")
@settings(max_examples=25)
@given(
    kind=st.sampled_from(["llama", "qwen2", "qwen3"]),
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=3),
    first_fraction=st.floats(0, 1),
    seed=st.integers(0, 2**16),
)
@example(kind="llama", lengths=[1], first_fraction=1.0, seed=0)  # a one-token prompt, nothing to decode
@example(kind="qwen3", lengths=[6, 1, 11], first_fraction=0.0, seed=1)  # one token first, then decode every token
@example(kind="qwen2", lengths=[12, 3], first_fraction=0.5, seed=2)  # a prefill chunk, then decode
def test_steps_over_the_cache_match_transformers(models, kind, lengths, first_fraction, seed):
    """Prefill a first chunk of each sequence, then one token per step: each step's logits are transformers'
    at those positions, so the forward writes K/V where the metadata says and reads them back later."""
    model, hf_model, _ = models(kind)
    g = torch.Generator().manual_seed(seed)
    blocks = torch.randperm(len(lengths) + 2, generator=g).tolist()  # scattered blocks, never in order
    seqs = [(torch.randint(0, 320, (n,), generator=g).tolist(), blocks[i]) for i, n in enumerate(lengths)]
    expected = [hf_logits(hf_model, tokens) for tokens, _ in seqs]
    cache = KVCache(model.config, (len(lengths) + 2) * 12, torch.float32)
    done = [max(1, round(first_fraction * n)) for n in lengths]
    logits = step(model, cache, seqs, [(0, d) for d in done], 12)
    rows = 0
    for i, d in enumerate(done):
        torch.testing.assert_close(logits[rows : rows + d], expected[i][:d], rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"sequence {i}'s first chunk (positions 0..{d - 1}): {m}")
        rows += d
    while any(d < n for d, n in zip(done, lengths)):
        live = [i for i, (d, n) in enumerate(zip(done, lengths)) if d < n]
        logits = step(model, cache, [seqs[i] for i in live], [(done[i], done[i] + 1) for i in live], 12)
        for row, i in enumerate(live):
            torch.testing.assert_close(
                logits[row], expected[i][done[i]], rtol=1e-4, atol=1e-4,
                msg=lambda m: f"sequence {i}, decoding position {done[i]} over {done[i]} cached tokens: {m}",
            )
            done[i] += 1


class CountingOps(LayerOps):
    def __init__(self):
        self.calls = {"project": 0, "rms_norm": 0, "rotary": 0, "swiglu": 0}

    def project(self, x, *projections):
        self.calls["project"] += 1
        return super().project(x, *projections)

    def rms_norm(self, x, weight, eps, residual=None):
        self.calls["rms_norm"] += 1
        return super().rms_norm(x, weight, eps, residual)

    def rotary(self, q, k, cos, sin):
        self.calls["rotary"] += 1
        return super().rotary(q, k, cos, sin)

    def swiglu(self, x, gate_proj, up_proj, down_proj):
        self.calls["swiglu"] += 1
        return super().swiglu(x, gate_proj, up_proj, down_proj)


class CountingBackend(BatchedTorchAttentionBackend):
    def __init__(self):
        super().__init__()
        self.caches = []

    def forward(self, q, k, v, k_cache, v_cache, meta, scale):
        self.caches.append(k_cache.data_ptr())
        return super().forward(q, k, v, k_cache, v_cache, meta, scale)


@pytest.mark.task("0.3")
def test_forward_runs_through_ops_backend_and_modules(models):
    """Other backends swap `ops`, `backend` and the modules (chapters 4, 5, 7): the forward must use them."""
    model, hf_model, _ = models("qwen3")
    ops, backend = CountingOps(), CountingBackend()
    model.ops, model.backend = ops, backend
    called = []
    hooks = [module.register_forward_hook(lambda m, i, o, name=name: called.append(name))
             for name, module in model.named_modules() if name.endswith(("embed_tokens", "o_proj", "lm_head"))]
    try:
        tokens = list(range(5, 12))
        cache = KVCache(model.config, 16, torch.float32)
        logits = step(model, cache, [(tokens, 1)], [(0, 7)], 8)
    finally:
        for hook in hooks:
            hook.remove()
        model.ops, model.backend = LayerOps(), BatchedTorchAttentionBackend()
    layers = model.config.num_layers
    assert ops.calls == {"project": layers, "rms_norm": 2 * layers + 1, "rotary": layers, "swiglu": layers}, (
        f"calls to model.ops in one forward: {ops.calls}; expected q/k/v projections, rotation and MLP once per "
        f"layer, and two norms per layer plus the final one"
    )
    assert backend.caches == [cache.k[i].data_ptr() for i in range(layers)], (
        "the backend runs once per layer, in order, each time with that layer's part of the cache (kv_cache.layer(i))"
    )
    assert called.count("model.embed_tokens") == 1 and called.count("lm_head") == 1, f"modules called: {called}"
    assert sum(name.endswith("o_proj") for name in called) == layers, "each layer's o_proj is called as a module"
    torch.testing.assert_close(
        logits, hf_logits(hf_model, tokens), rtol=1e-4, atol=1e-4,
        msg=lambda m: f"the calls are all there, but the logits differ from transformers' (qwen3, one 7-token prompt): {m}",
    )


@pytest.mark.task("0.3")
def test_kv_cache_layout_and_layer_views():
    config = read_config_like(num_layers=3, num_kv_heads=2, head_dim=8)
    cache = KVCache(config, 10, torch.bfloat16)
    for name, tensor in (("k", cache.k), ("v", cache.v)):
        assert tensor.shape == (3, 10, 2, 8), f"cache.{name} is [num_layers, num_slots, num_kv_heads, head_dim]"
        assert tensor.dtype == torch.bfloat16 and not tensor.any(), f"cache.{name}: zeros in the dtype asked for"
    assert cache.num_slots == 10 and cache.nbytes == 2 * 3 * 10 * 2 * 8 * 2
    k1, v1 = cache.layer(1)
    assert k1.shape == (10, 2, 8) and v1.shape == (10, 2, 8), "layer(i) is [num_slots, num_kv_heads, head_dim]"
    k1[4] = 1.0
    v1[7] = 2.0
    assert cache.k[1, 4].eq(1).all() and cache.v[1, 7].eq(2).all(), "layer(i) gives views: a write lands in the cache"
    assert cache.k[0].eq(0).all() and cache.k[2].eq(0).all() and cache.v[1, 4].eq(0).all(), "layer(1) is layer 1's K and V"


def read_config_like(**fields):
    from miniyaie.model import ModelConfig

    base = dict(family="llama", vocab_size=8, hidden_size=16, intermediate_size=8, num_layers=1, num_heads=2,
                num_kv_heads=1, head_dim=8, rms_norm_eps=1e-6, max_position_embeddings=64, rope_theta=10000.0)
    return ModelConfig(**{**base, **fields})


@pytest.mark.task("0.3")
def test_logits_are_float32_whatever_the_model_dtype(models):
    _, _, folder = models("llama-tied-mha")
    model = load_model(folder, dtype=torch.bfloat16)
    hidden = torch.randn(3, model.config.hidden_size, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    logits = model.compute_logits(hidden)
    assert logits.dtype == torch.float32 and logits.shape == (3, model.config.vocab_size), "float32 [rows, vocab]"
    expected = hidden.float() @ model.model.embed_tokens.weight.float().T
    torch.testing.assert_close(logits, expected, rtol=2e-2, atol=2e-2)
