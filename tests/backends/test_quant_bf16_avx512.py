"""Steps of many rows of the -a8 schemes on AVX512-BF16's dot products, where the CPU has no AMX
(backends/cpu/quant_bf16_avx512.cpp).

Oracle: the arithmetic the kernel promises, in float64 (test_quant_bf16_amx's): x rounded to bfloat16, each
weight dequantized from the layer's own codes (d * code + m, rounded once to float32, then to bfloat16), the
products summed. The kernel sums in float32, so it must equal that up to float32 rounding of the sums. Without
tiles the dispatcher must send a layer's steps of AVX512_BF16_ROWS rows or more here, and fewer to the 8-bit loop.
"""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.backends.cpu import kernels
from miniyaie.weights import int8_activations as a8
from tests.backends.test_quant_bf16_amx import dequantized_bf16, layer_of

LIBRARY = kernels.load()
pytestmark = [pytest.mark.ungraded,  # provided code
              pytest.mark.skipif(LIBRARY is None or not LIBRARY.quant_bf16_avx512_ready(), reason="no AVX512-BF16 here")]


def kernel(layer, x: torch.Tensor) -> torch.Tensor:
    w, y = layer.qweight, torch.empty(x.shape[0], layer.out_features)
    LIBRARY.quant_matmul_bf16_avx512(x.data_ptr(), x.shape[0], layer.in_features, w.codes.data_ptr(), w.bits,
                                     w.scales.data_ptr(), None if w.mins is None else w.mins.data_ptr(),
                                     layer.out_features, w.group, y.data_ptr(), torch.get_num_threads())
    return y


@settings(max_examples=15, deadline=None)
@given(rows=st.sampled_from([1, 7, 8, 9, 16, 23]), out=st.sampled_from([1, 16, 20, 32, 33, 70]),
       blocks=st.integers(1, 5), bits=st.sampled_from([4, 8]), wide_groups=st.booleans(), seed=st.integers(0, 2**16))
@example(rows=23, out=70, blocks=3, bits=4, wide_groups=False, seed=0).via("rows past a micro-kernel's 8, columns past a panel's 32")
@example(rows=8, out=32, blocks=1, bits=4, wide_groups=False, seed=1).via("one block: low and high nibbles")
@example(rows=9, out=20, blocks=4, bits=8, wide_groups=True, seed=0).via("8-bit groups of 64, signed codes")
def test_the_bfloat16_dot_products_equal_the_rounded_weights_times_the_rounded_activations(rows, out, blocks, bits,
                                                                                            wide_groups, seed):
    g = torch.Generator().manual_seed(seed)
    group = 64 if bits == 8 and wide_groups and blocks % 2 == 0 else 32
    layer = layer_of(bits, out, blocks * 32, group, g)
    x = torch.randn(rows, blocks * 32, generator=g) * 3
    y = kernel(layer, x)
    xb, wb = x.bfloat16().double(), dequantized_bf16(layer.qweight).double()
    want, size = xb @ wb.T, xb.abs() @ wb.abs().T
    worst = float(((y.double() - want).abs() / (size + 1e-30)).max())
    assert worst < 1e-5, (f"{bits}-bit, {rows}x{blocks * 32} by {out} on AVX512-BF16: off by {worst:.3g} of the sum of "
                          f"|x||w| from bfloat16(x) times bfloat16(d * code + m) (a code, scale or pair out of place)")


@pytest.mark.skipif(LIBRARY is not None and LIBRARY.quant_a8_amx_ready(), reason="with AMX the tiles take these steps")
def test_the_dispatcher_sends_steps_of_many_rows_here_and_fewer_to_the_8_bit_loop():
    g = torch.Generator().manual_seed(3)
    layer = layer_of(4, 48, 128, 32, g)
    x = torch.randn(a8.AVX512_BF16_ROWS, 128, generator=g)
    assert torch.equal(layer(x), kernel(layer, x)), f"{a8.AVX512_BF16_ROWS} rows: AVX512-BF16"
    try:
        LIBRARY.quant_a8_set_bf16_rows(1 << 40)
        int8 = layer(x)
    finally:
        LIBRARY.quant_a8_set_bf16_rows(a8.AVX512_BF16_ROWS)
    assert not torch.equal(kernel(layer, x), int8), "the two roundings differ (else this test shows nothing)"
    few = x[: a8.AVX512_BF16_ROWS - 1]
    try:
        LIBRARY.quant_a8_set_bf16_rows(1 << 40)
        want = layer(few)
    finally:
        LIBRARY.quant_a8_set_bf16_rows(a8.AVX512_BF16_ROWS)
    assert torch.equal(layer(few), want), f"{a8.AVX512_BF16_ROWS - 1} rows: the 8-bit loop"
