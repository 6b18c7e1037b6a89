"""Decode rows that share a cached prefix, through the C++ decode kernel, against chapter 0's reference.

The kernel attends rows that begin with the same block together, block by
block, so that a block they share is read from memory once. That is only a
change of order: each row's result must stay what the reference gives, for
any mix of shared and own blocks, groups larger than the kernel takes at
once, and every vector width. The backend counts the block reads a row
shared with the row before it: the proof that grouping runs.
"""

import random

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_batched_attention import VECTOR_WIDTHS, make_fast  # this folder is on sys.path under pytest
from tiny_models import save_tiny_model, transformers_greedy

from miniyaie.backends.batched_attention import CALL_COST_IN_SLOTS, MAX_GROUP_BYTES
from miniyaie.backends.cpu.paged_attention import MAX_ROWS_PER_GROUP, group_by_first_block
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import AttentionMetadata, SamplingParams, TorchAttentionBackend, load_model

pytestmark = pytest.mark.ungraded


def forked_step(block_size, prefixes, seed, num_kv_heads, head_dim):
    """Decode rows forked from a few prefixes: each row's table starts with its prefix's full blocks (shared),
    then blocks of its own. prefixes: [(prefix tokens, [own tokens of each row])]. Rows come shuffled."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    tables, lens, next_block = [], [], 0
    for prefix_len, own_lens in prefixes:
        shared = list(range(next_block, next_block + prefix_len // block_size))
        next_block += len(shared)
        for own in own_lens:
            length = len(shared) * block_size + own
            mine = list(range(next_block, next_block + -(-own // block_size)))
            next_block += len(mine)
            tables.append(shared + mine)
            lens.append(length)
    order = list(range(len(lens)))
    rng.shuffle(order)
    tables, lens = [tables[i] for i in order], [lens[i] for i in order]
    width = max(map(len, tables))
    blocks = list(range(next_block))
    rng.shuffle(blocks)  # the pool's blocks in a random place each
    tables = [[blocks[b] for b in t] + [0] * (width - len(t)) for t in tables]
    slots = [t[(n - 1) // block_size] * block_size + (n - 1) % block_size for t, n in zip(tables, lens)]
    meta = AttentionMetadata(query_lens=[1] * len(lens), seq_lens=lens, slot_mapping=torch.tensor(slots),
                             block_tables=torch.tensor(tables), block_size=block_size)
    pool = torch.randn(2, max(next_block, 1) * block_size, num_kv_heads, head_dim, generator=g)
    return meta, pool


@pytest.mark.parametrize("kind", list(VECTOR_WIDTHS))
@settings(max_examples=20, deadline=None)
@given(
    block_size=st.sampled_from([1, 4, 16]),
    heads=st.sampled_from([(9, 3), (4, 4), (8, 1), (10, 1)]),  # 9/3: SmolLM2; 10: the kernel's general loop
    head_dim=st.sampled_from([8, 64, 128]),
    prefixes=st.lists(st.tuples(st.integers(0, 48), st.lists(st.integers(1, 20), min_size=1, max_size=11)),
                      min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
@example(block_size=16, heads=(9, 3), head_dim=64, prefixes=[(48, [1, 5, 16, 17, 3, 9, 2, 20, 1, 4])], seed=0)  # past the cap
@example(block_size=16, heads=(9, 3), head_dim=64, prefixes=[(15, [3, 4]), (16, [1, 1])], seed=1)  # no full block / one
@example(block_size=1, heads=(8, 1), head_dim=128, prefixes=[(30, [1] * 9), (2, [7])], seed=2)
def test_rows_sharing_a_prefix_match_the_reference(kind, block_size, heads, head_dim, prefixes, seed):
    num_heads, num_kv_heads = heads
    meta, pool = forked_step(block_size, prefixes, seed, num_kv_heads, head_dim)
    g = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(len(meta.seq_lens), num_heads, head_dim, generator=g)
    k_new = pool[0][meta.slot_mapping].clone()  # the rows' own K/V, written again where they already are
    v_new = pool[1][meta.slot_mapping].clone()
    fast = make_fast(kind, CALL_COST_IN_SLOTS, MAX_GROUP_BYTES)
    expected = TorchAttentionBackend().forward(q, k_new, v_new, pool[0].clone(), pool[1].clone(), meta, head_dim**-0.5)
    got = fast.forward(q, k_new, v_new, pool[0].clone(), pool[1].clone(), meta, head_dim**-0.5)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert fast.decode_rows_in_kernel == len(meta.seq_lens)
    sharing = any(prefix_len >= block_size and len(own) > 1 for prefix_len, own in prefixes)
    if sharing:
        assert fast.decode_blocks_shared > 0, "rows that share blocks were attended apart: no block read was shared"
    else:
        assert fast.decode_blocks_shared == 0, "no two rows share a block, yet shared reads were counted"


@settings(max_examples=50)
@given(firsts=st.lists(st.integers(0, 4), max_size=30), max_rows=st.integers(1, 9))
@example(firsts=[], max_rows=8)
@example(firsts=[3] * 17, max_rows=8)  # one prefix, more rows than a group takes
def test_groups_put_rows_with_the_same_first_block_together(firsts, max_rows):
    tables = torch.tensor([[f, 99] for f in firsts], dtype=torch.int64).reshape(len(firsts), 2)
    order, starts = group_by_first_block(tables, max_rows)
    assert sorted(order.tolist()) == list(range(len(firsts))), "every row once"
    assert starts[0] == 0 and starts[-1] == len(firsts) and all(a < b for a, b in zip(starts, starts[1:]))
    groups = [[firsts[i] for i in order[a:b].tolist()] for a, b in zip(starts, starts[1:])]
    assert all(len(set(group)) == 1 and len(group) <= max_rows for group in groups)
    for first in set(firsts):  # a first block's rows make as few groups as the cap allows
        assert sum(group[0] == first for group in groups) == -(-firsts.count(first) // max_rows)


def test_engine_rows_sharing_a_cached_prefix_read_it_together(tmp_path):
    """Through the engine with the prefix cache: greedy output equals transformers, and the decode rows of
    the questions that share a system prompt shared their block reads."""
    hf_model = save_tiny_model("llama", tmp_path, hidden_size=256, num_attention_heads=4, num_key_value_heads=2)
    model = load_model(tmp_path)
    system = [(5 * j) % 50 + 1 for j in range(40)]
    prompts = [system + [(3 * i + j) % 50 + 1 for j in range(3 + i)] for i in range(MAX_ROWS_PER_GROUP + 2)]
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    engine = LLMEngine(model, EngineConfig(block_size=16, enable_prefix_caching=True))
    first = engine.generate(prompts[:1], params)  # caches the system prompt
    rest = engine.generate(prompts[1:], params)
    for prompt, output in zip(prompts, first + rest):
        assert output.token_ids == transformers_greedy(hf_model, prompt, params.max_tokens)
    assert model.backend.decode_blocks_shared > 0, "the questions' decode rows did not share the cached prompt's reads"
