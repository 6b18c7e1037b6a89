"""Steps of several rows of the -a8 schemes on AVX512-VNNI across tiles of 16 columns, where the CPU has no AMX
(backends/cpu/quant_a8_panels.cpp, over the layer's copy laid out once by quant_a8_lay_out_tiles).

Oracle: test_quant_a8's reference, the same quantized arithmetic over the layer's own codes (integer sums of
bytes, exact in int64, scaled per block in float64). The panels compute those very sums, so they must equal
it up to float32 rounding, whatever the rows, columns (past a panel of 16), blocks, bits and groups, and with
8-bit codes of -128 (x goes on the unsigned side as xq + 128 there, and the codes' sum comes off). Without
AMX the dispatcher must send a layer's steps of PANEL_ROWS rows or more here (every step: the panels win at
one row too), and fewer to the 8-bit loop.
"""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.backends.cpu import kernels
from miniyaie.quant import QuantizedLinear, quantize_int4, quantize_int8
from miniyaie.weights import int8_activations as a8
from tests.backends.test_quant_a8 import quantize, reference

LIBRARY = kernels.load()
pytestmark = [pytest.mark.ungraded,  # provided code
              pytest.mark.skipif(LIBRARY is None or not LIBRARY.quant_a8_panels_ready(), reason="no AVX512-VNNI here")]
no_amx = pytest.mark.skipif(LIBRARY is not None and LIBRARY.quant_a8_amx_ready(), reason="with AMX the tiles take these steps")


def layer_of(bits: int, out: int, k: int, group: int, g: torch.Generator) -> a8.Int8ActivationLinear:
    w = torch.randn(out, k, generator=g)
    layer = a8.Int8ActivationLinear.__new__(a8.Int8ActivationLinear)
    QuantizedLinear.__init__(layer, quantize_int4(w, 32) if bits == 4 else quantize_int8(w, group))
    return layer


def panels(layer, x: torch.Tensor) -> torch.Tensor:
    (codes, d, m), y = layer.tiles(), torch.empty(x.shape[0], layer.out_features)
    LIBRARY.quant_matmul_a8_panels(x.data_ptr(), x.shape[0], layer.in_features, codes.data_ptr(), layer.qweight.bits,
                                   d.data_ptr(), m.data_ptr() if m.numel() else None, layer.out_features, y.data_ptr(),
                                   torch.get_num_threads())
    return y


@settings(max_examples=15, deadline=None)
@given(rows=st.sampled_from([1, 4, 7, 8, 9, 23]), out=st.sampled_from([1, 16, 20, 33, 70]), blocks=st.integers(1, 5),
       bits=st.sampled_from([4, 8]), wide_groups=st.booleans(), lowest_code=st.booleans(), seed=st.integers(0, 2**16))
@example(rows=23, out=70, blocks=3, bits=4, wide_groups=False, lowest_code=False, seed=0).via(
    "rows past a micro-kernel's 8, columns past a tile's 16, an odd block count (the last pair's high nibbles empty)")
@example(rows=8, out=16, blocks=1, bits=4, wide_groups=False, lowest_code=False, seed=1).via("one block: low and high nibbles")
@example(rows=9, out=20, blocks=4, bits=8, wide_groups=True, lowest_code=False, seed=0).via("8-bit groups of 64")
@example(rows=4, out=16, blocks=2, bits=8, wide_groups=False, lowest_code=True, seed=2).via("8-bit codes of -128")
def test_the_panels_equal_the_integer_sums_scaled_per_block(rows, out, blocks, bits, wide_groups, lowest_code, seed):
    g = torch.Generator().manual_seed(seed)
    group = 64 if bits == 8 and wide_groups and blocks % 2 == 0 else 32
    layer = layer_of(bits, out, blocks * 32, group, g)
    if bits == 8 and lowest_code:
        layer.qweight.codes[::2, ::3] = -128  # no quantizer of ours writes it; a file may
    assert layer.tiles() is not None, "a CPU with AVX512-VNNI lays the weights out in tiles"
    x = torch.randn(rows, blocks * 32, generator=g) * 3
    x[0, :32] = 0.0  # a block of zeros: step 0, codes 0
    y = panels(layer, x)
    want = reference(*quantize(LIBRARY, x), layer.qweight)
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-5 * (float(want.abs().max()) + 1e-6)), (
        f"{bits}-bit, {rows}x{blocks * 32} by {out} on the VNNI panels: off by up to "
        f"{float((y.double() - want).abs().max()):.3g} from the integer sums scaled per block "
        f"(a word of codes, a scale or a column out of place)")


@no_amx
def test_the_dispatcher_sends_steps_of_panel_rows_or_more_here_and_fewer_to_the_8_bit_loop():
    g = torch.Generator().manual_seed(3)
    layer = layer_of(4, 48, 128, 32, g)
    x = torch.randn(max(a8.PANEL_ROWS, 3), 128, generator=g)
    assert torch.equal(layer(x), panels(layer, x)), f"{x.shape[0]} rows (PANEL_ROWS = {a8.PANEL_ROWS}): the VNNI panels"
    try:
        LIBRARY.quant_a8_set_panel_rows(x.shape[0] + 1)  # one row short of the threshold: the 8-bit loop
        loop = layer(x)
    finally:
        LIBRARY.quant_a8_set_panel_rows(a8.PANEL_ROWS)
    assert not torch.equal(panels(layer, x), loop), "the two orders of addition differ (else this test shows nothing)"
    assert torch.allclose(loop, panels(layer, x), rtol=1e-5, atol=1e-5 * float(loop.abs().max())), "the same sums either way"
