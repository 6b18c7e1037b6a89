"""Task 4.2: RMSNorm with a fused residual add."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kernel_cases import assert_close, dtypes, generator

from miniyaie.kernels import rms_norm, rms_norm_reference
from miniyaie.model import rms_norm as chapter0_rms_norm


@pytest.mark.task("4.2")
@settings(max_examples=15)
@given(rows=st.integers(1, 9), hidden=st.sampled_from([64, 80, 96, 576]), dtype=dtypes,
       with_residual=st.booleans(), seed=st.integers(0, 2**16))
@example(rows=1, hidden=80, dtype=torch.bfloat16, with_residual=True, seed=0)
def test_rms_norm_matches_reference(rows, hidden, dtype, with_residual, seed):
    gen = generator(seed)
    x, weight = (torch.randn(rows, hidden, generator=gen) * 3).to(dtype), torch.randn(hidden, generator=gen).to(dtype)
    residual = torch.randn(rows, hidden, generator=gen).to(dtype) if with_residual else None
    out, summed = rms_norm(x, weight, 1e-6, residual)
    expected_out, expected_sum = rms_norm_reference(x, weight, 1e-6, residual)
    assert out.dtype == dtype and summed.dtype == dtype
    assert_close(out, expected_out, dtype)
    assert_close(summed, expected_sum, dtype)


@pytest.mark.task("4.2")
def test_fused_add_equals_chapter0_norm_of_the_sum():
    x, residual, weight = torch.randn(4, 3, 64), torch.randn(4, 3, 64), torch.rand(64)
    out, summed = rms_norm(x, weight, 1e-5, residual)
    torch.testing.assert_close(summed, x + residual)
    torch.testing.assert_close(out, chapter0_rms_norm(x + residual, weight, 1e-5))
    assert out.shape == x.shape
