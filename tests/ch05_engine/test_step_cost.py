"""Task 5.16: the predicted bytes and FLOPs of a step are the ones a real step touches, and the roofline's verdict.

The prediction is checked against counts, not against a formula: a tiny
CausalLM runs the same step over a paged KV cache while step_counter.py
records the parameter storages it reads (embedding rows apart), the K/V
rows it gathers and scatters, and torch's FlopCounterMode its matmul FLOPs.
"""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from step_counter import count_step, tiny_config, tiny_model

from miniyaie.engine.step_cost import Machine, Roofline, SeqStep, StepCost, roofline, step_cost
from miniyaie.model import ModelConfig

KINDS = {  # GQA untied; MHA tied; Qwen2 (tied, q/k/v biases); Qwen3 (q/k norms, head_dim 24); biases everywhere
    "llama": {}, "llama-tied-mha": {}, "qwen2": {}, "qwen3": {},
    "llama-biases": dict(attention_bias=True, mlp_bias=True, num_key_value_heads=1),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_models = {}


def _model(kind: str, dtype: str):
    if (kind, dtype) not in _models:
        base, overrides = ("llama", KINDS[kind]) if kind == "llama-biases" else (kind, {})
        _models[kind, dtype] = tiny_model(tiny_config(base, **overrides), DTYPES[dtype])
    return _models[kind, dtype]


seq_steps = st.builds(SeqStep, new_tokens=st.integers(1, 24), context=st.integers(0, 40), samples=st.booleans())
steps = st.lists(seq_steps, min_size=1, max_size=5)
DECODES = [SeqStep(1, 9), SeqStep(1, 0), SeqStep(1, 31)]
LONG_PREFILL = [SeqStep(96, 0)]
MIXED = [SeqStep(1, 17), SeqStep(12, 8, samples=False), SeqStep(5, 0), SeqStep(1, 3)]
NO_SAMPLER = [SeqStep(7, 0, samples=False), SeqStep(3, 5, samples=False)]


def _check(kind, weight, kv, seqs, block_size):
    model = _model(kind, weight)
    counted = count_step(model, seqs, DTYPES[kv], block_size)
    predicted = step_cost(model.config, seqs, DTYPES[weight].itemsize, DTYPES[kv].itemsize)
    return counted, predicted


@pytest.mark.task("5.16")
@settings(max_examples=40)
@given(kind=st.sampled_from(sorted(KINDS)), weight=st.sampled_from(sorted(DTYPES)), kv=st.sampled_from(sorted(DTYPES)),
       seqs=steps, block_size=st.sampled_from([1, 4, 16]))
@example(kind="llama", weight="bfloat16", kv="bfloat16", seqs=DECODES, block_size=16)
@example(kind="llama-tied-mha", weight="float32", kv="float32", seqs=DECODES, block_size=4)
@example(kind="qwen2", weight="float32", kv="bfloat16", seqs=LONG_PREFILL, block_size=16)
@example(kind="llama", weight="float32", kv="float32", seqs=MIXED, block_size=4)
@example(kind="qwen2", weight="float32", kv="float32", seqs=NO_SAMPLER, block_size=4)
@example(kind="llama", weight="float32", kv="float32", seqs=NO_SAMPLER, block_size=4)
def test_the_predicted_bytes_are_the_bytes_a_real_step_touches(kind, weight, kv, seqs, block_size):
    counted, predicted = _check(kind, weight, kv, seqs, block_size)
    assert predicted.weight_bytes == counted.weight_bytes, (
        f"weights: predicted {predicted.weight_bytes} bytes, the step read {counted.weight_bytes} ({kind}, {weight}); "
        "every layer's parameters once, the embedding's looked-up rows only, the LM head only if a row samples, "
        "a tied matrix once"
    )
    assert predicted.kv_write_bytes == counted.kv_write_bytes, (
        f"K/V written: predicted {predicted.kv_write_bytes}, the step wrote {counted.kv_write_bytes} ({kv} cache)"
    )
    assert predicted.kv_read_bytes == counted.kv_read_bytes, (
        f"K/V read: predicted {predicted.kv_read_bytes}, the step read {counted.kv_read_bytes} ({kv} cache): every "
        "token of each context after the step, in every layer, K and V"
    )


@pytest.mark.task("5.16")
@settings(max_examples=40)
@given(kind=st.sampled_from(sorted(KINDS)), seqs=steps.filter(lambda seqs: all(s.context + s.new_tokens > 1 for s in seqs)))
@example(kind="llama", seqs=[SeqStep(1, 9), SeqStep(1, 1), SeqStep(1, 31)])
@example(kind="qwen3", seqs=LONG_PREFILL)
@example(kind="llama-tied-mha", seqs=MIXED)
@example(kind="qwen2", seqs=NO_SAMPLER)
def test_the_predicted_flops_are_the_matmul_flops_the_forward_counts(kind, seqs):
    """FlopCounterMode counts matmuls only (2 per multiply-add), so the prediction must equal it exactly.

    Left out: a sequence whose context is one token (a one-token prompt), where torch's einsum does
    the weighted sum of V as an elementwise multiply, which FlopCounterMode does not see.
    """
    counted, predicted = _check(kind, "float32", "float32", seqs, 4)
    assert predicted.flops == counted.flops, (
        f"FLOPs: predicted {predicted.flops}, the forward's matmuls did {counted.flops} ({kind}, {seqs})"
    )


SMOLLM2 = ModelConfig("llama", 49152, 576, 1536, 30, 9, 3, 64, 1e-5, 8192, 100000.0, tie_word_embeddings=True)
H100 = Machine(bytes_per_s=3.35e12, flops_per_s=989e12, name="H100 SXM, bf16 dense")


@pytest.mark.task("5.16")
def test_the_docstrings_examples_and_errors():
    assert step_cost(SMOLLM2, [SeqStep(1, 1023)]) == StepCost(
        weight_bytes=269_030_016, kv_read_bytes=23_592_960, kv_write_bytes=23_040, flops=339_738_624
    )
    eight_bit = step_cost(SMOLLM2, [SeqStep(1, 1023)], weight_dtype_bytes=1, kv_dtype_bytes=1)  # int8 / fp8: half the bytes
    assert (eight_bit.weight_bytes, eight_bit.kv_read_bytes, eight_bit.flops) == (134_515_008, 11_796_480, 339_738_624)
    assert roofline(StepCost(100, 0, 0, 1000), Machine(10, 50)) == Roofline(10.0, 20.0, 20.0, "compute")
    assert roofline(StepCost(100, 0, 0, 500), Machine(10, 50)) == Roofline(10.0, 10.0, 10.0, "memory")  # a tie
    with pytest.raises(ValueError):
        step_cost(SMOLLM2, [])
    with pytest.raises(ValueError):
        step_cost(SMOLLM2, [SeqStep(1, 0)], weight_dtype_bytes=0)
    with pytest.raises(ValueError):
        step_cost(SMOLLM2, [SeqStep(1, 0)], kv_dtype_bytes=0)


@pytest.mark.task("5.16")
def test_decodes_are_memory_bound_until_the_batch_is_large_and_a_long_prefill_is_compute_bound():
    """On an H100 in bf16: batching decodes shares the weights, so the time per token falls until FLOPs catch up."""
    one = roofline(step_cost(SMOLLM2, [SeqStep(1, 512)]), H100)
    assert one.bound == "memory" and one.seconds == one.memory_s
    per_token = [roofline(step_cost(SMOLLM2, [SeqStep(1, 512)] * b), H100).seconds / b for b in (1, 8, 64)]
    assert per_token[0] > per_token[1] > per_token[2]
    prefill = roofline(step_cost(SMOLLM2, [SeqStep(4096, 0)]), H100)
    assert prefill.bound == "compute" and prefill.seconds == prefill.compute_s > prefill.memory_s
    long_context = step_cost(SMOLLM2, [SeqStep(1, 32767)] * 16)
    assert long_context.kv_read_bytes > long_context.weight_bytes  # past some context, K/V are most of a decode's bytes
