"""Shared inputs for the kernel tests: paged K/V pools with random block tables, tolerances."""

from __future__ import annotations

import os

import torch
from hypothesis import strategies as st

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# fp32: the interpreter is exact-ish, a GPU uses TF32 in tl.dot; bf16: the interpreter truncates on store.
TOLERANCES = {torch.float32: dict(atol=2e-3, rtol=2e-3), torch.float16: dict(atol=2e-3, rtol=2e-3),
              torch.bfloat16: dict(atol=2e-2, rtol=1.6e-2)}
HEAD_DIMS = st.sampled_from([64, 80, 96])
GQA = st.sampled_from([1, 3, 4])  # query heads per KV head
PAGE_SIZES = st.sampled_from([1, 16])
dtypes = st.sampled_from(list(DTYPES.values()))
# Where the tests' tensors live: a GPU runs the kernels compiled, on CUDA tensors (conftest.py makes it
# torch's default device); without one, tests/conftest.py chose Triton's interpreter, which reads CPU tensors.
DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


# For tests that compare float32 with float32 and need more than TOLERANCES: exact-ish in the interpreter;
# on a GPU, tl.dot rounds float32 inputs to TF32 (10-bit mantissa), a few thousandths on attention outputs.
FP32_CLOSE = dict(atol=1e-5, rtol=1e-5) if DEVICE == "cpu" else dict(atol=1e-2, rtol=1e-2)


def generator(seed: int) -> torch.Generator:
    """A seeded generator on the tests' device (torch draws on the device of its generator)."""
    return torch.Generator(device=DEVICE).manual_seed(seed)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    torch.testing.assert_close(actual.float(), expected.float(), **TOLERANCES[dtype])


def paged_pool(seq_lens: list[int], num_kv_heads: int, head_dim: int, page_size: int, dtype, seed: int, spare_pages: int = 3):
    """K/V pools whose pages are handed out in a random order, and the block table of each sequence.

    Slots no sequence owns hold NaN: a kernel that reads outside its block
    table (or forgets a mask) turns its output into NaN.
    """
    gen = generator(seed)
    pages_per_seq = [-(-n // page_size) for n in seq_lens]
    num_pages = sum(pages_per_seq) + spare_pages
    order = torch.randperm(num_pages, generator=gen)
    max_pages = max(pages_per_seq)
    block_tables = torch.zeros(len(seq_lens), max_pages, dtype=torch.int64)
    k_cache = torch.full((num_pages * page_size, num_kv_heads, head_dim), float("nan"), dtype=dtype)
    v_cache = k_cache.clone()
    used = 0
    for seq, (n, pages) in enumerate(zip(seq_lens, pages_per_seq)):
        block_tables[seq, :pages] = order[used : used + pages]
        used += pages
        positions = torch.arange(n)
        slots = block_tables[seq, positions // page_size] * page_size + positions % page_size
        k_cache[slots] = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        v_cache[slots] = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
    return k_cache, v_cache, block_tables
