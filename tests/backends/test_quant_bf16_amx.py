"""Prefill chunks of the -a8 schemes on AMX's bfloat16 multiplies (backends/cpu/quant_bf16_amx.cpp).

Oracle: the arithmetic the kernel promises, in float64: x rounded to bfloat16, each weight dequantized from the
layer's own codes (d * code + m, rounded once to float32, then to bfloat16), the products summed. The kernel sums
in float32, so it must equal that up to float32 rounding of the sums. The dispatcher must send a layer's steps of
BF16_ROWS rows or more here, and fewer to the 8-bit paths.
"""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.backends.cpu import kernels
from miniyaie.quant import QuantizedLinear, quantize_int4, quantize_int8
from miniyaie.quant.blocks import unpack_nibbles
from miniyaie.weights import int8_activations as a8

LIBRARY = kernels.load()
pytestmark = [pytest.mark.ungraded,  # provided code
              pytest.mark.skipif(LIBRARY is None or not LIBRARY.quant_bf16_amx_ready(), reason="no AMX bfloat16 here")]


def dequantized_bf16(w) -> torch.Tensor:
    """The layer's weights as the kernel rounds them: d * code + m exact, rounded to float32, then to bfloat16."""
    n, k = w.shape
    codes = (unpack_nibbles(w.codes, w.group) if w.bits == 4 else w.codes).double().view(n, k // w.group, w.group)
    exact = codes * w.scales.double()[..., None]
    if w.mins is not None:
        exact = exact + w.mins.double()[..., None]
    return exact.view(n, k).float().bfloat16()


def layer_of(bits: int, out: int, k: int, group: int, g: torch.Generator) -> a8.Int8ActivationLinear:
    w = torch.randn(out, k, generator=g)
    layer = a8.Int8ActivationLinear.__new__(a8.Int8ActivationLinear)
    QuantizedLinear.__init__(layer, quantize_int4(w, 32) if bits == 4 else quantize_int8(w, group))
    return layer


def run_on(layer, x: torch.Tensor, amx_rows: int, bf16_rows: int) -> torch.Tensor:
    try:
        LIBRARY.quant_a8_set_amx_rows(amx_rows, bf16_rows)
        return layer(x)
    finally:
        LIBRARY.quant_a8_set_amx_rows(a8.AMX_ROWS, a8.BF16_ROWS)


@settings(max_examples=15, deadline=None)
@given(rows=st.sampled_from([1, 16, 17, 33, 64, 70]), out=st.sampled_from([1, 16, 20, 32, 48, 50]),
       blocks=st.integers(1, 5), bits=st.sampled_from([4, 8]), wide_groups=st.booleans(), seed=st.integers(0, 2**16))
@example(rows=33, out=50, blocks=3, bits=4, wide_groups=False, seed=0).via("rows and columns past tile pairs, an odd block count")
@example(rows=64, out=32, blocks=4, bits=4, wide_groups=False, seed=1).via("4-bit pairs of blocks: high nibbles")
@example(rows=17, out=20, blocks=2, bits=8, wide_groups=True, seed=0).via("8-bit groups of 64, signed codes")
def test_the_bfloat16_tiles_equal_the_rounded_weights_times_the_rounded_activations(rows, out, blocks, bits, wide_groups, seed):
    g = torch.Generator().manual_seed(seed)
    group = 64 if bits == 8 and wide_groups and blocks % 2 == 0 else 32
    layer = layer_of(bits, out, blocks * 32, group, g)
    x = torch.randn(rows, blocks * 32, generator=g) * 3
    y = run_on(layer, x, 1, 1)
    xb, wb = x.bfloat16().double(), dequantized_bf16(layer.qweight).double()
    want, size = xb @ wb.T, xb.abs() @ wb.abs().T
    worst = float(((y.double() - want).abs() / (size + 1e-30)).max())
    assert worst < 1e-5, (f"{bits}-bit, {rows}x{blocks * 32} by {out} on the bfloat16 tiles: off by {worst:.3g} of the sum of "
                          f"|x||w| from bfloat16(x) times bfloat16(d * code + m) (a code, scale or pair out of place)")


def test_the_dispatcher_sends_prefill_chunks_here_and_decode_steps_to_the_8_bit_paths():
    g = torch.Generator().manual_seed(3)
    layer = layer_of(4, 48, 128, 32, g)
    x = torch.randn(a8.BF16_ROWS, 128, generator=g)
    bf16 = run_on(layer, x, 1, 1)
    int8 = run_on(layer, x, 1, 1 << 40)
    assert torch.equal(layer(x), bf16), f"{a8.BF16_ROWS} rows: the bfloat16 tiles"
    assert not torch.equal(bf16, int8), "the two roundings differ (else this test shows nothing)"
    few = x[: a8.BF16_ROWS - 1]
    assert torch.equal(layer(few), run_on(layer, few, 1, 1 << 40)), f"{a8.BF16_ROWS - 1} rows: the 8-bit tiles"
