"""The batched CPU backend against chapter 0's per-sequence reference.

Random steps mix decode rows (one new token) and prefill/extend chunks of
several sequences, over blocks handed out in a shuffled order (so block
tables are random), with GQA and MHA, block sizes 1 and 16. Both backends
run the same steps on their own copy of a pool full of garbage: outputs must
be close and the pools identical (same K/V written to the same slots). The
C++ kernels are also built with each vector width another machine would
give them (4, 8 and 16 floats) and checked the same way.
"""

import random

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tiny_models import save_tiny_model, transformers_greedy

from miniyaie.backends.batched_attention import CALL_COST_IN_SLOTS, MAX_GROUP_BYTES, BatchedTorchAttentionBackend, split_by_length
from miniyaie.backends.cpu.paged_attention import PagedCpuAttentionBackend
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import AttentionMetadata, SamplingParams, TorchAttentionBackend, load_model
from miniyaie.paged import BlockAllocator, grow_block_table, slot_mapping

pytestmark = pytest.mark.ungraded
NUM_LAYERS = 2


VECTOR_WIDTHS = {"cpu": (), **{f"cpu-{w}-lanes": (f"-DMINIYAIE_VECTOR_FLOATS={w}",) for w in (4, 8, 16)}}


def make_fast(kind: str, call_cost: int, group_bytes: int):
    """kind: torch, cpu (the kernels as this machine builds them), or cpu-N-lanes (built with N-float vectors,
    the width of another machine's registers: cpu_vector.h)."""
    if kind == "torch":
        return BatchedTorchAttentionBackend(call_cost, group_bytes)
    from miniyaie.backends.cpu import kernels as cpu_kernels

    fast = PagedCpuAttentionBackend(cpu_kernels.build(VECTOR_WIDTHS[kind]) if VECTOR_WIDTHS[kind] else None)
    assert fast.library is not None, "the C++ decode kernel did not build (is g++ installed?): see the log"
    fast.call_cost_in_slots, fast.max_group_bytes = call_cost, group_bytes
    return fast


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16])  # bfloat16: a narrower K/V cache (kv_cache_dtype)
@pytest.mark.parametrize("kind", ["torch", *VECTOR_WIDTHS])
@settings(max_examples=25)
@given(
    block_size=st.sampled_from([1, 4, 16, 48]),  # 48: pieces of 16 slots, three per block
    heads=st.sampled_from([(4, 4), (6, 2), (3, 1), (8, 1), (10, 1)]),  # 8: the kernel's largest fixed group; 10: its general loop
    head_dim=st.sampled_from([8, 64, 128]),  # 64, 128: the kernels' compiled-in sizes; 8: the general loop, and chunks on torch
    seq_lens=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    call_cost=st.sampled_from([CALL_COST_IN_SLOTS, 0, 24]),  # 0: a group per decode length
    group_bytes=st.sampled_from([MAX_GROUP_BYTES, 0, 4096]),  # 0: every decode row alone
    seed=st.integers(0, 2**16),
)
@example(block_size=1, heads=(6, 2), head_dim=64, seq_lens=[1], call_cost=CALL_COST_IN_SLOTS, group_bytes=MAX_GROUP_BYTES, seed=0)  # one sequence of one token
@example(block_size=16, heads=(6, 2), head_dim=64, seq_lens=[33, 1, 16, 17], call_cost=0, group_bytes=MAX_GROUP_BYTES, seed=3)  # block boundaries, length 1
@example(block_size=16, heads=(4, 4), head_dim=64, seq_lens=[40, 40, 40, 40, 40], call_cost=CALL_COST_IN_SLOTS, group_bytes=0, seed=5)
@example(block_size=1, heads=(6, 2), head_dim=64, seq_lens=[3, 40, 2, 39, 35, 17, 18, 1], call_cost=24, group_bytes=4096, seed=7)  # decode rows in length groups
@example(block_size=16, heads=(10, 1), head_dim=8, seq_lens=[20, 1, 37], call_cost=0, group_bytes=MAX_GROUP_BYTES, seed=13)  # the kernel's general loop
@example(block_size=4, heads=(8, 1), head_dim=64, seq_lens=[9, 30, 1], call_cost=0, group_bytes=MAX_GROUP_BYTES, seed=17)  # its largest fixed group
@example(block_size=48, heads=(3, 1), head_dim=64, seq_lens=[40, 17, 33, 1], call_cost=0, group_bytes=MAX_GROUP_BYTES, seed=11)  # a piece smaller than a block
def test_batched_backend_matches_the_reference_on_mixed_steps(kind, cache_dtype, block_size, heads, head_dim, seq_lens, call_cost,
                                                              group_bytes, seed):
    """The reference runs on a float32 pool holding what the fast backend's pool holds (K/V values that
    bfloat16 represents exactly, when the pool is bfloat16): the same keys, so the same outputs."""
    num_heads, num_kv_heads = heads
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // block_size) for n in seq_lens) + 2
    allocator = BlockAllocator(num_blocks)
    scattered = allocator.allocate_many(num_blocks)
    rng.shuffle(scattered)
    for block in scattered:
        allocator.free(block)
    shape = (NUM_LAYERS, num_blocks * block_size, num_kv_heads, head_dim)
    ref_k, ref_v = (torch.randn(shape, generator=g).to(cache_dtype).float() for _ in "kv")
    fast_k, fast_v = ref_k.to(cache_dtype), ref_v.to(cache_dtype)
    reference, fast, scale = TorchAttentionBackend(), make_fast(kind, call_cost, group_bytes), head_dim**-0.5
    decode_rows = chunk_rows = chunk_steps = 0

    tables, done, steps = [[] for _ in seq_lens], [0] * len(seq_lens), 0
    while any(d < n for d, n in zip(done, seq_lens)):
        step = [s for s in range(len(seq_lens)) if done[s] < seq_lens[s] and rng.random() < 0.8]
        rng.shuffle(step)
        if not step:
            continue
        # a decode row after the first chunk, or a chunk of a prefill
        ends = {s: min(seq_lens[s], done[s] + (1 if done[s] else rng.choice([1, 2, 5, 16, 40]))) for s in step}
        for s in step:
            grow_block_table(tables[s], ends[s], block_size, allocator)
        width = max(len(tables[s]) for s in step)
        meta = AttentionMetadata(
            query_lens=[ends[s] - done[s] for s in step],
            seq_lens=[ends[s] for s in step],
            slot_mapping=torch.tensor([x for s in step for x in slot_mapping(tables[s], done[s], ends[s], block_size)]),
            block_tables=torch.tensor([tables[s] + [0] * (width - len(tables[s])) for s in step]),
            block_size=block_size,
        )
        num_new = sum(meta.query_lens)
        decode_rows += meta.query_lens.count(1)
        chunk_rows += sum(n for n in meta.query_lens if n > 1)
        chunk_steps += any(n > 1 for n in meta.query_lens)
        for layer in range(NUM_LAYERS):
            q = torch.randn(num_new, num_heads, head_dim, generator=g)
            k = torch.randn(num_new, num_kv_heads, head_dim, generator=g).to(cache_dtype).float()
            v = torch.randn(num_new, num_kv_heads, head_dim, generator=g).to(cache_dtype).float()
            expected = reference.forward(q, k, v, ref_k[layer], ref_v[layer], meta, scale)
            got = fast.forward(q, k, v, fast_k[layer], fast_v[layer], meta, scale)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        steps += 1
        for s in step:
            done[s] = ends[s]
    assert fast_k.dtype == cache_dtype and torch.equal(fast_k.float(), ref_k) and torch.equal(fast_v.float(), ref_v)
    if kind == "torch":
        assert fast.num_plans == steps, "the step's plan is built once and shared by every layer"
    else:  # the kernels need no plan; chunks of other head sizes take the batched path, planned once a step
        assert fast.num_plans == (0 if head_dim in (64, 128) else chunk_steps)
        assert fast.decode_rows_in_kernel == decode_rows, "every one-query row went through the C++ kernel"
        in_kernel = chunk_rows if head_dim in (64, 128) else 0  # other head sizes: the batched torch path
        assert fast.chunk_rows_in_kernel == in_kernel, "every chunk row went through the C++ chunk kernel"


@given(
    lengths=st.lists(st.integers(1, 400), max_size=9).map(sorted),
    call_cost=st.integers(0, 500),
    max_keys=st.sampled_from([1, 64, 500, 1000, 10**9]),
)
@example(lengths=[], call_cost=256, max_keys=1000)
@example(lengths=[30, 31, 400, 400], call_cost=256, max_keys=10**9)  # short rows apart from long ones
@example(lengths=[16] * 6, call_cost=0, max_keys=10**9)  # equal lengths: nothing to save
@example(lengths=[16] * 6, call_cost=500, max_keys=32)  # expensive calls, but the cap allows two rows a run
@example(lengths=[900], call_cost=0, max_keys=64)  # a row longer than the cap runs alone
def test_split_by_length_finds_the_cheapest_cut(lengths, call_cost, max_keys):
    """Runs cover the rows in order, respect the cap, and no other allowed cut pads fewer keys for the calls made."""
    runs = split_by_length(lengths, call_cost, max_keys)
    if not lengths:
        assert runs == []
        return
    assert [i for a, b in runs for i in range(a, b)] == list(range(len(lengths)))
    assert all(a < b for a, b in runs)
    assert all(b - a == 1 or (b - a) * lengths[b - 1] <= max_keys for a, b in runs)

    def cost(cuts):  # cuts: the run boundaries strictly inside 0..n; None if a run breaks the cap
        edges = [0, *cuts, len(lengths)]
        if any(b - a > 1 and (b - a) * lengths[b - 1] > max_keys for a, b in zip(edges, edges[1:])):
            return None
        return sum((b - a) * lengths[b - 1] + call_cost for a, b in zip(edges, edges[1:]))

    every_cut = (cost([i for i in range(1, len(lengths)) if mask >> i & 1]) for mask in range(2 ** len(lengths)))
    assert cost([b for _, b in runs[:-1]]) == min(c for c in every_cut if c is not None)


@pytest.fixture(scope="module", params=["llama", "qwen3", "llama-head-64"])
def tiny(request, tmp_path_factory):
    """Head sizes 16 and 24 (chunks on the batched torch path), and 64 (both C++ kernels, as SmolLM2)."""
    path = tmp_path_factory.mktemp(f"tiny-{request.param}")
    if request.param == "llama-head-64":
        hf_model = save_tiny_model("llama", path, hidden_size=256, num_attention_heads=4, num_key_value_heads=2)
    else:
        hf_model = save_tiny_model(request.param, path)
    return load_model(path), hf_model


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("block_size", [1, 16])
def test_engine_cpu_backends_greedy_equal_transformers(tiny, block_size, backend):
    """The default on CPU ("auto": the C++ decode kernel) and the batched torch one, through the engine."""
    model, hf_model = tiny
    prompts = [[(7 * i + 3 * j) % 50 + 1 for j in range(n)] for i, n in enumerate([5, 23, 1, 40, 9, 17])]
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    engine = LLMEngine(model, EngineConfig(block_size=block_size, max_num_batched_tokens=24, attention_backend=backend))
    expected_type = PagedCpuAttentionBackend if backend == "auto" else BatchedTorchAttentionBackend
    assert type(model.backend) is expected_type
    outputs = engine.generate(prompts, params)
    for prompt, output in zip(prompts, outputs):
        assert output.token_ids == transformers_greedy(hf_model, prompt, params.max_tokens)
    steps_seen = model.backend.num_steps if backend == "auto" else model.backend.num_plans
    assert steps_seen == engine.counters["steps"], "every step went through the backend"
    if backend == "auto":
        decode_steps = len(prompts) * (params.max_tokens - 1)  # every token after the first is a decode row
        assert model.backend.decode_rows_in_kernel >= decode_steps, (
            f"the C++ kernel attended {model.backend.decode_rows_in_kernel} rows; the run had {decode_steps} decode rows")
        if model.config.head_dim == 64:  # every row of every step went through one of the two kernels
            rows = sum(len(p) for p in prompts) + decode_steps
            in_kernels = model.backend.chunk_rows_in_kernel + model.backend.decode_rows_in_kernel
            assert model.backend.chunk_rows_in_kernel > 0 and in_kernels >= rows, (in_kernels, rows)


def test_loading_the_kernel_leaves_the_processs_floating_point_alone():
    """Built with -ffast-math, the library must not switch the process to flush-to-zero (gcc's crtfastmath)."""
    from miniyaie.backends.cpu import kernels as cpu_kernels

    assert cpu_kernels.load() is not None
    tiny_value = torch.tensor([1e-38]) / 10  # a subnormal float32
    assert tiny_value.item() != 0.0, "subnormal numbers are flushed to zero after loading the kernel library"


def test_a_failed_build_is_reported_and_leaves_no_library(tmp_path, monkeypatch, caplog):
    """A compiler that fails: load() says so once and returns None (the engine then uses torch ops), caching nothing."""
    from miniyaie.backends.cpu import kernels as cpu_kernels

    compiler = tmp_path / "failing-compiler"
    compiler.write_text("#!/bin/sh\necho 'no such flag' >&2\nexit 1\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    monkeypatch.setenv(cpu_kernels.CACHE_ENV, str(tmp_path / "kernels"))
    with caplog.at_level("WARNING"):
        assert cpu_kernels.load.__wrapped__() is None
    assert "building the CPU kernels failed" in caplog.text and "no such flag" in caplog.text
    assert not list((tmp_path / "kernels").glob("*.so")), "a failed build must not leave a library in the cache"


def test_reference_backend_stays_selectable(tiny):
    model, _ = tiny
    LLMEngine(model, EngineConfig(attention_backend="reference"))
    assert type(model.backend) is TorchAttentionBackend


@pytest.mark.parametrize("kind", ["torch", "cpu"])
def test_a_block_table_too_short_for_its_sequence_is_refused(kind):
    """The C++ kernel trusts the table it is given: a short one must be refused before it reads past it."""
    fast = make_fast(kind, CALL_COST_IN_SLOTS, MAX_GROUP_BYTES)
    k_cache = torch.zeros(4 * 16, 1, 8)
    meta = AttentionMetadata(query_lens=[1], seq_lens=[20], slot_mapping=torch.tensor([19]),
                             block_tables=torch.tensor([[0]]), block_size=16)  # 20 tokens need 2 blocks
    q, k = torch.randn(1, 2, 8), torch.randn(1, 1, 8)
    with pytest.raises(ValueError, match="fewer blocks"):
        fast.forward(q, k, k.clone(), k_cache, k_cache.clone(), meta, 8**-0.5)
