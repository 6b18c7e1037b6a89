"""Weights in 4- and 8-bit blocks (miniyaie/quant) and the C++ kernel that multiplies by them.

Oracles: the gguf package's own dequantization of Q4_1 and Q8_0 blocks; the float32 product with the
dequantized weights (the kernel must equal it up to the order of the additions); and the engine's
greedy output with a float32 model holding exactly those dequantized weights.
"""

import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.quant import QuantizedLinear, from_gguf_blocks, quantize_int4, quantize_int8, quantize_model, weight_bytes

pytestmark = pytest.mark.ungraded  # provided code (chapter 10's tasks will grade their own parts)


@given(rows=st.integers(1, 6), groups=st.integers(1, 4), group=st.sampled_from([32, 64, 128]),
       symmetric=st.booleans(), spread=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16))
@example(rows=2, groups=1, group=32, symmetric=False, spread=1.0, seed=0).via("one block a row")
def test_int4_blocks_hold_every_weight_within_half_a_step(rows, groups, group, symmetric, spread, seed):
    w = torch.randn(rows, groups * group, generator=torch.Generator().manual_seed(seed)) * spread
    q = quantize_int4(w, group, symmetric)
    assert q.codes.shape == (rows, groups * group // 2) and q.nbytes < w.numel() * w.element_size() / 4
    error = (q.dequantize() - w).abs().view(rows, groups, group)
    step = q.scales[..., None]
    assert bool((error <= step / 2 * (1 + 1e-5) + 1e-6 * spread).all()), (
        f"a weight is {float((error / step).max()):.3f} steps from its dequantized value; at most half a step")


@given(rows=st.integers(1, 6), width=st.sampled_from([32, 96, 576]), seed=st.integers(0, 2**16))
def test_int8_per_channel_holds_every_weight_within_half_a_step(rows, width, seed):
    w = torch.randn(rows, width, generator=torch.Generator().manual_seed(seed))
    q = quantize_int8(w)
    assert q.scales.shape == (rows, 1), "one scale per output channel"
    assert bool(((q.dequantize() - w).abs() <= q.scales / 2 * (1 + 1e-5)).all())


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_gguf_blocks_are_read_as_they_are_and_decode_as_the_gguf_package_decodes_them(kind):
    qtype = getattr(gguf.GGMLQuantizationType, kind)
    w = np.random.default_rng(0).standard_normal((8, 96)).astype(np.float32)
    raw = gguf.quants.quantize(w, qtype)
    ours = from_gguf_blocks(kind, raw, (8, 96))
    assert ours.nbytes <= raw.nbytes * 2, "the blocks are kept, not widened to float32"
    assert torch.equal(ours.dequantize(), torch.from_numpy(gguf.quants.dequantize(raw, qtype))), (
        f"{kind}: our dequantization must be the gguf package's, bit for bit")
    with pytest.raises(ValueError, match="Q4_K"):
        from_gguf_blocks("Q4_K", raw, (8, 96))


@settings(max_examples=30)
@given(rows=st.sampled_from([1, 2, 3, 4, 5, 16, 17, 40, 65]), out=st.sampled_from([4, 6, 64, 100]),
       groups=st.integers(1, 3), group=st.sampled_from([32, 64, 128]), bits=st.sampled_from([4, 8]),
       bias=st.booleans(), seed=st.integers(0, 2**16))
@example(rows=1, out=64, groups=2, group=32, bits=4, bias=False, seed=0).via("a decode row, four columns at a time")
@example(rows=17, out=6, groups=1, group=32, bits=8, bias=True, seed=0).via("a batch: each weight row decoded once")
@example(rows=65, out=6, groups=2, group=32, bits=4, bias=True, seed=0).via("a prefill chunk: the float32 library")
def test_the_kernel_equals_the_float32_product_with_the_dequantized_weights(rows, out, groups, group, bits, bias, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, groups * group, generator=g)
    q = quantize_int4(w, group) if bits == 4 else quantize_int8(w, group)
    layer = QuantizedLinear(q, torch.randn(out, generator=g) if bias else None)
    x = torch.randn(rows, groups * group, generator=g)
    want = torch.nn.functional.linear(x, q.dequantize(), layer.bias)
    assert torch.allclose(layer(x), want, rtol=1e-4, atol=1e-4), f"largest difference {(layer(x) - want).abs().max()}"
    assert layer(x.view(rows, 1, -1)).shape == (rows, 1, out)


def test_a_width_that_is_not_a_multiple_of_the_group_is_refused_with_one_line():
    with pytest.raises(ValueError, match="multiple of the group"):
        quantize_int4(torch.randn(4, 48), 32)
    with pytest.raises(ValueError, match="unknown quantization"):
        quantize_model(torch.nn.Linear(2, 2), "fp3")


@pytest.mark.parametrize("scheme", ["int8", "int4"])
def test_a_quantized_tiny_model_generates_what_float32_generates_with_the_same_weights(tmp_path, scheme):
    """The engine over blocks and over their float32 dequantization: the same greedy tokens."""
    sys.path.append(str(Path(__file__).resolve().parents[1] / "ch00_model"))
    from tiny_models import save_tiny_model

    from miniyaie.engine import EngineConfig, LLMEngine, SamplingParams
    from miniyaie.model import load_model

    save_tiny_model("llama", tmp_path)
    quantized, dense = load_model(tmp_path), load_model(tmp_path)
    quantize_model(quantized, scheme)
    with torch.no_grad():  # the float32 model holds exactly the weights the blocks mean
        for qa, da in zip(quantized.model.layers, dense.model.layers):
            for part in ("self_attn", "mlp"):
                for name, child in getattr(qa, part).named_children():
                    if isinstance(child, QuantizedLinear):
                        getattr(getattr(da, part), name).weight.copy_(child.qweight.dequantize())
    assert weight_bytes(quantized) < weight_bytes(dense)
    with pytest.raises(ValueError, match="given loaded, with float weights"):  # the setting would do nothing
        LLMEngine(dense, EngineConfig(block_size=4, num_blocks=64, quantization=scheme))
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6], list(range(20, 60))]
    params = SamplingParams(max_tokens=24, ignore_eos=True)
    outputs = [[o.token_ids for o in LLMEngine(m, EngineConfig(block_size=4, num_blocks=64)).generate(prompts, params)]
               for m in (quantized, dense)]
    assert outputs[0] == outputs[1], f"{scheme}: the blocks and their float32 weights generate different tokens"
    layer = quantized.model.layers[0]
    assert layer.self_attn.q_proj.merged is layer.self_attn.v_proj.merged and layer.mlp.up_proj.merged.calls > 0, (
        "q/k/v and gate/up over blocks run as one kernel call each, on the engine's steps")


def test_scheme_names_parse_and_a_bad_one_is_refused_in_one_line():
    import argparse

    from miniyaie.cli.args import _quantization
    from miniyaie.quant import parse_scheme

    assert parse_scheme("int4-sym-g64") == parse_scheme("int4-sym-g64") and parse_scheme("int4-sym-g64").group == 64
    assert parse_scheme("int4").group == 32 and not parse_scheme("int4").symmetric and parse_scheme("int4-sym").symmetric
    for bad in ("fp3", "int4-g48", "int4-g", "int8-g32"):
        with pytest.raises(ValueError, match="quantization"):
            parse_scheme(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown quantization 'fp3'"):
        _quantization("fp3")


def test_inference_engine_takes_quantization_and_refuses_a_group_that_does_not_divide_a_layer(tmp_path):
    for folder in ("ch00_model", "ch05_engine"):
        sys.path.append(str(Path(__file__).resolve().parents[1] / folder))
    from tiny_models import save_tiny_model
    from tiny_tokenizer import save_tiny_tokenizer

    from miniyaie.engine import EngineConfig, InferenceEngine
    from miniyaie.engine.errors import ModelLoadError

    save_tiny_model("llama", tmp_path, intermediate_size=96)
    save_tiny_tokenizer(tmp_path)
    engine = InferenceEngine(str(tmp_path), EngineConfig(block_size=4, num_blocks=32), quantization="int4-sym")
    try:
        layer = engine.loaded.model.model.layers[0]
        assert isinstance(layer.mlp.down_proj, QuantizedLinear) and layer.mlp.down_proj.qweight.mins is not None
        assert engine.generate_text("hello", max_tokens=4) is not None
    finally:
        engine.close()
    with pytest.raises(ModelLoadError, match="int4-g64.*multiple of the group"):  # down_proj is 96 wide
        InferenceEngine(str(tmp_path), quantization="int4-g64")
