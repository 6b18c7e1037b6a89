"""Task 4.1: paged decode attention (split-KV) against its torch reference."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kernel_cases import FP32_CLOSE, GQA, HEAD_DIMS, PAGE_SIZES, assert_close, dtypes, generator, paged_pool

from miniyaie.kernels import decode_attention, decode_attention_reference

seq_lens = st.lists(st.integers(1, 96), min_size=1, max_size=4)


def check(lens, group, head_dim, page_size, dtype, num_splits, seed=0, num_kv_heads=2):
    k_cache, v_cache, block_tables = paged_pool(lens, num_kv_heads, head_dim, page_size, dtype, seed)
    q = torch.randn(len(lens), num_kv_heads * group, head_dim, generator=generator(seed + 1)).to(dtype)
    lens_t = torch.tensor(lens)
    args = (q, k_cache, v_cache, block_tables, lens_t, page_size, head_dim**-0.5)
    out = decode_attention(*args, num_splits=num_splits)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out.float()).all(), "read a slot outside the block table (they hold NaN)"
    assert_close(out, decode_attention_reference(*args), dtype)


@pytest.mark.task("4.1")
@settings(max_examples=12)
@given(lens=seq_lens, group=GQA, head_dim=HEAD_DIMS, page_size=PAGE_SIZES, dtype=dtypes)
@example(lens=[1], group=1, head_dim=64, page_size=1, dtype=torch.float32)  # a one-token sequence
@example(lens=[16, 32], group=4, head_dim=80, page_size=16, dtype=torch.float16)  # ends exactly on a page boundary
@example(lens=[17, 1, 33], group=3, head_dim=96, page_size=16, dtype=torch.bfloat16)  # one past a boundary
def test_decode_attention_one_split_matches_reference(lens, group, head_dim, page_size, dtype):
    check(lens, group, head_dim, page_size, dtype, num_splits=1)


@pytest.mark.task("4.1")
@settings(max_examples=12)
@given(lens=seq_lens, group=GQA, head_dim=HEAD_DIMS, page_size=PAGE_SIZES, dtype=dtypes, num_splits=st.integers(2, 6))
@example(lens=[1, 90], group=4, head_dim=64, page_size=16, dtype=torch.float32, num_splits=6)  # the short one has empty splits
@example(lens=[48], group=1, head_dim=96, page_size=1, dtype=torch.float16, num_splits=3)  # splits end on tile edges
def test_split_kv_partials_merge_to_the_reference(lens, group, head_dim, page_size, dtype, num_splits):
    check(lens, group, head_dim, page_size, dtype, num_splits)


@pytest.mark.task("4.1")
def test_default_split_count_on_a_long_context():
    check([300, 7], group=4, head_dim=64, page_size=16, dtype=torch.float32, num_splits=None)


@pytest.mark.task("4.1")
def test_each_query_head_reads_its_own_kv_head():
    """GQA: query heads 0-2 share KV head 0 and 3-5 KV head 1; different V per KV head tells them apart."""
    lens, group = [5], 3
    k_cache, v_cache, block_tables = paged_pool(lens, 2, 64, 1, torch.float32, seed=3)
    v_cache[:, 0], v_cache[:, 1] = 1.0, -1.0
    q = torch.randn(1, 6, 64)
    out = decode_attention(q, k_cache, v_cache, block_tables, torch.tensor(lens), 1, 0.125, num_splits=1)
    ones = torch.ones(group, 64)
    torch.testing.assert_close(out[0, :group], ones, **FP32_CLOSE, msg=lambda m: f"query heads 0-2 must read KV head 0 (V = +1): {m}")
    torch.testing.assert_close(out[0, group:], -ones, **FP32_CLOSE, msg=lambda m: f"query heads 3-5 must read KV head 1 (V = -1): {m}")
