"""The opt-in 8-bit activations (schemes "<scheme>-a8", miniyaie/weights/int8_activations.py, backends/cpu/quant_a8.cpp).

Oracles: the quantizer's contract (each activation within half a step of its block's grid, the step
max|x| / 127, the block sum the codes' sum times the step), and a torch reference of the same quantized
arithmetic over the kernel's own codes: integer sums (exact, int64) scaled per block in float64. The
kernel must equal it up to the float32 rounding of the scaled sums. The AVX2 fallback is built and
checked the same way on any AVX2 CPU. Greedy equality with float32 is not asked of this path (it rounds
the activations); the engine is checked to run the kernel, and to refuse the scheme where it cannot.
"""

import sys
from pathlib import Path

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.backends.cpu import kernels
from miniyaie.quant import QuantizedLinear, quantize_int4, quantize_int8
from miniyaie.quant.blocks import unpack_nibbles
from miniyaie.weights import int8_activations as a8

pytestmark = pytest.mark.ungraded  # provided code

LIBRARY = kernels.load()
needs_kernel = pytest.mark.skipif(LIBRARY is None or LIBRARY.quant_a8_isa() == 0, reason="no 8-bit activation kernel here")


def quantize(library, x: torch.Tensor):
    m, k = x.shape
    xq, dx, xs = torch.empty(m, k, dtype=torch.int8), torch.empty(m, k // 32), torch.empty(m, k // 32)
    library.quantize_activations_q8(x.data_ptr(), m, k, xq.data_ptr(), dx.data_ptr(), xs.data_ptr(), 1)
    return xq, dx, xs


def reference(xq, dx, xs, w) -> torch.Tensor:
    """The same arithmetic in torch: per block of 32, d * dx * (integer sum of codes times codes) (+ m * xs)."""
    m, k = xq.shape
    codes = (unpack_nibbles(w.codes, w.group) if w.bits == 4 else w.codes).to(torch.int64).view(w.shape[0], k // 32, 32)
    sums = torch.einsum("mbj,nbj->mnb", xq.to(torch.int64).view(m, k // 32, 32), codes).double()
    d = w.scales.double().repeat_interleave(w.group // 32, dim=1)
    y = (sums * d[None] * dx.double()[:, None, :]).sum(-1)
    return y if w.mins is None else y + (w.mins.double()[None] * xs.double()[:, None, :]).sum(-1)


def check_product(library, rows, out, blocks, bits, group, seed):
    g = torch.Generator().manual_seed(seed)
    k = blocks * 32
    w = torch.randn(out, k, generator=g)
    q = quantize_int4(w, 32) if bits == 4 else quantize_int8(w, group)
    x = torch.randn(rows, k, generator=g) * torch.rand(rows, k // 32, 1, generator=g).repeat_interleave(32, 1).view(rows, k)
    x[0, :32] = 0.0  # a block of zeros: step 0, codes 0
    xq, dx, xs = quantize(library, x)
    y = torch.empty(rows, out)
    library.quant_matmul_a8(xq.data_ptr(), dx.data_ptr(), xs.data_ptr(), rows, k, q.codes.data_ptr(), q.bits,
                            q.scales.data_ptr(), None if q.mins is None else q.mins.data_ptr(), out, q.group,
                            y.data_ptr(), 1)
    want = reference(xq, dx, xs, q)
    scale = float(want.abs().max()) + 1e-6
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-5 * scale), (
        f"{bits}-bit, {rows}x{k} by {out}: largest difference {float((y.double() - want).abs().max()):.3g} "
        f"from the integer sums scaled per block")


@needs_kernel
@settings(max_examples=25, deadline=None)
@given(rows=st.sampled_from([1, 2, 4, 5, 9]), out=st.sampled_from([1, 4, 6, 36]), blocks=st.integers(1, 5),
       bits=st.sampled_from([4, 8]), per_channel=st.booleans(), seed=st.integers(0, 2**16))
@example(rows=1, out=4, blocks=2, bits=4, per_channel=False, seed=0).via("a decode row: two blocks a VNNI instruction")
@example(rows=1, out=4, blocks=3, bits=8, per_channel=False, seed=0).via("an odd block count: the one-block tail")
@example(rows=5, out=6, blocks=2, bits=4, per_channel=False, seed=0).via("row and column tiles with remainders")
@example(rows=4, out=4, blocks=18, bits=8, per_channel=True, seed=0).via("int8 per channel: one scale over 18 blocks")
def test_the_kernel_equals_the_integer_sums_scaled_per_block(rows, out, blocks, bits, per_channel, seed):
    check_product(LIBRARY, rows, out, blocks, bits, blocks * 32 if per_channel and bits == 8 else 32, seed)


@needs_kernel
def test_the_avx2_fallback_equals_the_integer_sums_too():
    library = kernels.build(("-DMINIYAIE_A8_AVX2",))
    assert library.quant_a8_isa() == 1, "MINIYAIE_A8_AVX2 builds the maddubs path"
    for rows, out, blocks, bits in ((1, 4, 3, 4), (5, 6, 2, 8), (4, 8, 18, 4)):
        check_product(library, rows, out, blocks, bits, 32, rows)


@pytest.mark.skipif(LIBRARY is None or not LIBRARY.quant_a8_amx_ready(), reason="no AMX tiles here")
@settings(max_examples=12, deadline=None)
@given(rows=st.sampled_from([1, 2, 16, 17, 40]), out=st.sampled_from([1, 16, 20, 48]), blocks=st.integers(1, 5),
       bits=st.sampled_from([4, 8]), wide_groups=st.booleans(), seed=st.integers(0, 2**16))
@example(rows=17, out=20, blocks=3, bits=4, wide_groups=False, seed=0).via("rows and columns past a tile of 16, an odd pair")
@example(rows=16, out=16, blocks=2, bits=8, wide_groups=False, seed=0).via("8-bit codes, signed by signed")
@example(rows=2, out=48, blocks=4, bits=8, wide_groups=True, seed=0).via("8-bit groups of 64: a scale over two blocks")
def test_the_weights_laid_out_for_amx_give_the_same_products(rows, out, blocks, bits, wide_groups, seed):
    """The layer's copy for the tile unit (made once) against the integer sums of its own codes, at every row count."""
    g = torch.Generator().manual_seed(seed)
    group = 64 if bits == 8 and wide_groups and blocks % 2 == 0 else 32
    w = torch.randn(out, blocks * 32, generator=g)
    layer = a8.Int8ActivationLinear.__new__(a8.Int8ActivationLinear)
    QuantizedLinear.__init__(layer, quantize_int4(w, 32) if bits == 4 else quantize_int8(w, group))
    x = torch.randn(rows, blocks * 32, generator=g)
    try:
        LIBRARY.quant_a8_set_amx_rows(1, 1 << 40)  # every row count on the 8-bit tiles
        tiles = layer(x)
    finally:
        LIBRARY.quant_a8_set_amx_rows(a8.AMX_ROWS, a8.BF16_ROWS)
    assert layer.tiles() is not None and layer.tile_codes.numel() == LIBRARY.quant_a8_tile_bytes(out, blocks * 32, bits)
    want = reference(*quantize(LIBRARY, x), layer.qweight)
    assert torch.allclose(tiles.double(), want, rtol=1e-5, atol=1e-5 * (float(want.abs().max()) + 1e-6)), (
        f"{bits}-bit, {rows}x{blocks * 32} by {out} on AMX tiles: off by up to {float((tiles.double() - want).abs().max()):.3g} "
        f"from the integer sums scaled per block")


def test_a_layers_tiles_are_made_again_for_a_new_weight():
    """A weight swapped after the tiles were made (a LoRA merge, a reload): the old tiles must not be read."""
    if LIBRARY is None or not LIBRARY.quant_a8_amx_ready():
        pytest.skip("no AMX tiles here")
    g = torch.Generator().manual_seed(1)
    layer = a8.Int8ActivationLinear.__new__(a8.Int8ActivationLinear)
    QuantizedLinear.__init__(layer, quantize_int4(torch.randn(16, 64, generator=g), 32))
    x = torch.randn(4, 64, generator=g)
    layer(x)
    layer.qweight = quantize_int4(torch.randn(16, 64, generator=g), 32)
    assert torch.allclose(layer(x).double(), reference(*quantize(LIBRARY, x), layer.qweight), rtol=1e-5, atol=1e-4)


@needs_kernel
@given(rows=st.integers(1, 3), blocks=st.integers(1, 4), spread=st.floats(1e-6, 1e4), seed=st.integers(0, 2**16))
@example(rows=1, blocks=1, spread=1.0, seed=0)
def test_activations_are_rounded_within_half_a_step_of_their_blocks_grid(rows, blocks, spread, seed):
    x = torch.randn(rows, blocks * 32, generator=torch.Generator().manual_seed(seed)) * spread
    xq, dx, xs = quantize(LIBRARY, x)
    b = x.view(rows, blocks, 32)
    assert torch.allclose(dx, b.abs().amax(-1) / 127, rtol=1e-6, atol=0), "the step is max|x| / 127"
    assert int(xq.abs().max()) <= 127
    error = (xq.view(rows, blocks, 32).float() * dx[..., None] - b).abs()
    assert bool((error <= dx[..., None] * (0.5 + 1e-5)).all()), "every activation within half a step of its code"
    assert torch.allclose(xs, dx * xq.view(rows, blocks, 32).sum(-1).float(), rtol=1e-6), "xs = step * sum of codes"


@needs_kernel
def test_the_engine_runs_the_kernel_with_an_a8_scheme_and_its_answers_stay_close(tmp_path):
    for folder in ("ch00_model", "ch05_engine"):
        sys.path.append(str(Path(__file__).resolve().parents[1] / folder))
    from tiny_models import save_tiny_model
    from tiny_tokenizer import save_tiny_tokenizer

    from miniyaie.engine import EngineConfig, InferenceEngine

    save_tiny_model("llama", tmp_path, intermediate_size=96)
    save_tiny_tokenizer(tmp_path)
    engine = InferenceEngine(str(tmp_path), EngineConfig(block_size=4, num_blocks=32), quantization="int4-a8")
    try:
        layer = engine.loaded.model.model.layers[0]
        assert isinstance(layer.mlp.down_proj, a8.Int8ActivationLinear)
        assert isinstance(layer.mlp.up_proj.merged.linear, a8.Int8ActivationLinear), "the merged gate/up too"
        before, stack = dict(a8.calls), engine.llm.runner.decode_graphs  # decode steps may run in the CPU decode stack
        steps_before = stack.counters["steps"] if stack is not None else 0
        assert engine.generate_text("hello", max_tokens=4) is not None
        in_layers = a8.calls["linear"] > before["linear"] and a8.calls["rows"] > before["rows"]
        in_stack = stack is not None and stack.counters["steps"] > steps_before and layer.mlp.down_proj.kernel_fields()[8] == 1
        assert in_layers or in_stack, "the a8 kernel ran (in the layers, or in the decode stack with 8-bit activations)"
    finally:
        engine.close()


def test_an_a8_scheme_is_refused_in_one_line_where_it_cannot_run(monkeypatch):
    import argparse

    from miniyaie.cli.args import _quantization

    assert _quantization("gguf-a8") == "gguf-a8" and _quantization("int4-sym-a8") == "int4-sym-a8"
    with pytest.raises(argparse.ArgumentTypeError, match="none"):
        _quantization("none-a8")
    layer = QuantizedLinear(quantize_int4(torch.randn(4, 128), 64))
    model = torch.nn.Sequential(layer)
    with pytest.raises(ValueError, match="groups are 64"):
        a8.use_int8_activations(model)
    assert type(layer) is QuantizedLinear, "a refused model is left as it was"
    with pytest.raises(ValueError, match="CPU in float32 only"):
        a8.use_int8_activations(model, "cpu", torch.bfloat16)
    monkeypatch.setattr(a8, "kernel_isa", lambda: None)
    with pytest.raises(ValueError, match="AVX2"):
        a8.use_int8_activations(torch.nn.Sequential(QuantizedLinear(quantize_int8(torch.randn(4, 64)))))
