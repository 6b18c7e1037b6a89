"""Task 4.2: SiLU-and-mul."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kernel_cases import assert_close, dtypes, generator

from miniyaie.kernels import silu_and_mul, silu_and_mul_reference


@pytest.mark.task("4.2")
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


@pytest.mark.task("4.2")
@pytest.mark.parametrize("n", [1, 100, 1023, 1025])  # every last program ragged
def test_silu_and_mul_writes_nothing_at_or_past_n(n):
    """The kernel's contract: it writes elements [0, n) of out and nothing at or past n. Launched on
    buffers longer than n, the tail of out must keep what it held (a neighbour's data in a real pool)."""
    from miniyaie.kernels._triton import triton
    from miniyaie.kernels.activation import _silu_and_mul_kernel

    gen = generator(n)
    gate, up = torch.randn(n + 64, generator=gen), torch.randn(n + 64, generator=gen)
    out = torch.full((n + 64,), 7.0)
    _silu_and_mul_kernel[(triton.cdiv(n, 1024),)](gate, up, out, n, BLOCK=1024)
    assert_close(out[:n], silu_and_mul_reference(gate[:n], up[:n]), torch.float32)
    tail = out[n:]
    assert torch.all(tail == 7.0), (
        f"the kernel wrote at or past n = {n}: out[{n}:] starts {tail[:4].tolist()}, it held 7.0 (mask the "
        "last program's offsets to those below n)")
