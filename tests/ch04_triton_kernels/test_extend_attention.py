"""Task 4.1: extend attention over a cached prefix plus the new tokens, against its torch reference."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kernel_cases import FP32_CLOSE, GQA, HEAD_DIMS, PAGE_SIZES, assert_close, dtypes, generator, paged_pool

from miniyaie.kernels import extend_attention, extend_attention_reference
from miniyaie.model import causal_attention

# (cached prefix, new tokens) per sequence
chunks = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 40)), min_size=1, max_size=3)


def run(chunks, group, head_dim, page_size, dtype, seed=0, num_kv_heads=2):
    lens = [prefix + new for prefix, new in chunks]
    k_cache, v_cache, block_tables = paged_pool(lens, num_kv_heads, head_dim, page_size, dtype, seed)
    query_lens = torch.tensor([new for _, new in chunks])
    query_start = torch.nn.functional.pad(query_lens.cumsum(0), (1, 0))
    gen = generator(seed + 1)
    q = torch.randn(int(query_lens.sum()), num_kv_heads * group, head_dim, generator=gen).to(dtype)
    args = (q, k_cache, v_cache, block_tables, query_start, torch.tensor(lens), page_size, head_dim**-0.5)
    return extend_attention(*args), extend_attention_reference(*args), (q, k_cache, v_cache, block_tables, lens)


@pytest.mark.task("4.1")
@settings(max_examples=12)
@given(chunks=chunks, group=GQA, head_dim=HEAD_DIMS, page_size=PAGE_SIZES, dtype=dtypes)
@example(chunks=[(0, 1)], group=1, head_dim=64, page_size=1, dtype=torch.float32)  # a one-token prompt
@example(chunks=[(16, 16), (0, 33)], group=4, head_dim=80, page_size=16, dtype=torch.float16)  # prefix on a page edge
@example(chunks=[(5, 1), (0, 20), (31, 2)], group=3, head_dim=96, page_size=16, dtype=torch.bfloat16)  # decode mixed in
def test_extend_attention_matches_reference(chunks, group, head_dim, page_size, dtype):
    out, expected, _ = run(chunks, group, head_dim, page_size, dtype)
    assert torch.isfinite(out.float()).all(), (
        "NaN/inf in the output: a read of a slot outside the block table (they hold NaN), or a query row that saw "
        "no key (new token i sees keys 0 .. prefix_len + i, itself included)"
    )
    assert_close(out, expected, dtype)


@pytest.mark.task("4.1")
def test_the_mask_is_offset_by_the_prefix():
    """Chapter 0's causal_attention on the gathered context is the same computation, one sequence at a time."""
    out, _, (q, k_cache, v_cache, block_tables, lens) = run([(7, 9), (0, 5)], 2, 64, 16, torch.float32, seed=4)
    slots = block_tables[0, :1] * 16 + torch.arange(16)
    expected = causal_attention(q[:9], k_cache[slots[: lens[0]]], v_cache[slots[: lens[0]]], 64**-0.5)
    torch.testing.assert_close(out[:9], expected, **FP32_CLOSE, msg=lambda m: (
        f"sequence 0 has 7 cached tokens and 9 new ones: new token i must see keys 0 .. 7 + i, no later one: {m}"))


@pytest.mark.task("4.1")
def test_each_query_head_of_a_new_token_reads_its_own_kv_head():
    """GQA: query heads 0-1 share KV head 0 and 2-3 KV head 1; different V per KV head tells them apart."""
    lens, group = [6], 2
    k_cache, v_cache, block_tables = paged_pool(lens, 2, 64, 1, torch.float32, seed=3)
    v_cache[:, 0], v_cache[:, 1] = 1.0, -1.0
    q = torch.randn(4, 2 * group, 64)  # 4 new tokens after a cached prefix of 2
    out = extend_attention(q, k_cache, v_cache, block_tables, torch.tensor([0, 4]), torch.tensor(lens), 1, 0.125)
    ones = torch.ones(4, group, 64)
    torch.testing.assert_close(out[:, :group], ones, **FP32_CLOSE, msg=lambda m: f"query heads 0-1 must read KV head 0 (V = +1): {m}")
    torch.testing.assert_close(out[:, group:], -ones, **FP32_CLOSE, msg=lambda m: f"query heads 2-3 must read KV head 1 (V = -1): {m}")
