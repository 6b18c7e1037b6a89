"""Task 4.5: SiLU-and-mul."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kernel_cases import assert_close, dtypes, generator

from miniyaie.kernels import silu_and_mul, silu_and_mul_reference


@pytest.mark.task("4.5")
@settings(max_examples=15)
@given(rows=st.integers(1, 5), width=st.sampled_from([1, 96, 1536, 2049]), dtype=dtypes, seed=st.integers(0, 2**16))
@example(rows=3, width=2049, dtype=torch.bfloat16, seed=0)  # past one 1024-element program, ragged end
def test_silu_and_mul_matches_reference(rows, width, dtype, seed):
    gen = generator(seed)
    gate = (torch.randn(rows, width, generator=gen) * 4).to(dtype)
    up = torch.randn(rows, width, generator=gen).to(dtype)
    out = silu_and_mul(gate, up)
    assert out.shape == gate.shape and out.dtype == dtype
    assert_close(out, silu_and_mul_reference(gate, up), dtype)
