"""The cpu backend's element-wise layers (C++ loops): equal to chapter 0's torch versions, on the hot path."""

import platform

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tiny_models import save_tiny_model

from miniyaie.backends.cpu import kernels as cpu_kernels
from miniyaie.backends.cpu.allocator import keep_freed_memory
from miniyaie.backends.cpu.layer_ops import CpuLayerOps
from miniyaie.backends.cpu.linear import MergedLinears, PackedLinear, packing_available
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import LayerOps, SamplingParams, load_model

pytestmark = [pytest.mark.ungraded,
              pytest.mark.skipif(cpu_kernels.load() is None, reason="no C++ compiler to build the CPU kernels")]

TORCH = LayerOps()


class Projection:
    """A stand-in for a linear layer: returns a fresh copy of a fixed tensor, as a real projection does."""

    def __init__(self, out: torch.Tensor):
        self.out = out

    def __call__(self, x):
        return self.out.clone()


def _angles(rows, head_dim, g):
    half = torch.randn(rows, head_dim // 2, generator=g) * 10
    angles = torch.cat([half, half], dim=-1)
    return angles.cos(), angles.sin()


# Sizes cross the loops' one-thread / many-threads switch (2**15 elements).
@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 600), hidden=st.sampled_from([8, 576, 100]), residual=st.booleans(),
       eps=st.sampled_from([1e-5, 1e-6]), seed=st.integers(0, 2**16))
@example(rows=1, hidden=576, residual=False, eps=1e-5, seed=0)  # one decode row, no residual (the first norm)
@example(rows=600, hidden=576, residual=True, eps=1e-5, seed=1)  # a chunk, threaded
def test_add_rms_norm_equals_the_torch_version(rows, hidden, residual, eps, seed):
    g = torch.Generator().manual_seed(seed)
    x, weight = torch.randn(rows, hidden, generator=g) * 3, torch.randn(hidden, generator=g)
    res = torch.randn(rows, hidden, generator=g) if residual else None
    expected = TORCH.rms_norm(x, weight, eps, res)
    x_before = x.clone()
    got = CpuLayerOps().rms_norm(x, weight, eps, res)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], expected[1])
    assert torch.equal(x, x_before), "the input is not written"


def test_an_all_zero_row_normalises_to_zero_not_nan():
    out, _ = CpuLayerOps().rms_norm(torch.zeros(3, 64), torch.ones(64), 1e-6)
    assert torch.equal(out, torch.zeros(3, 64))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 300), heads=st.sampled_from([(9, 3), (4, 4), (2, 1)]), head_dim=st.sampled_from([8, 64, 128]),
       seed=st.integers(0, 2**16))
@example(rows=1, heads=(9, 3), head_dim=64, seed=0)
@example(rows=300, heads=(9, 3), head_dim=128, seed=1)
def test_rotary_in_place_equals_the_torch_version(rows, heads, head_dim, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(rows, heads[0], head_dim, generator=g), torch.randn(rows, heads[1], head_dim, generator=g)
    cos, sin = _angles(rows, head_dim, g)
    expected_q, expected_k = TORCH.rotary(q, k, cos, sin)
    got_q, got_k = CpuLayerOps().rotary(q, k, cos, sin)
    assert got_q is q and got_k is k, "turned where they lie"
    torch.testing.assert_close(got_q, expected_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, expected_k, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(3, 300), width=st.sampled_from([1536, 2000]), seed=st.integers(0, 2**16))
@example(rows=3, width=1536, seed=0)  # just over the size where the loop takes over
@example(rows=300, width=1536, seed=1)
def test_swiglu_equals_the_torch_version(rows, width, seed):
    g = torch.Generator().manual_seed(seed)
    gate, up = torch.randn(rows, width, generator=g) * 4, torch.randn(rows, width, generator=g)
    expected = TORCH.swiglu(None, Projection(gate), Projection(up), lambda h: h * 2)
    ops = CpuLayerOps()
    got = ops.swiglu(None, Projection(gate), Projection(up), lambda h: h * 2)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert ops.calls["swiglu"] == 1, "ran in the loop"


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 300), heads=st.sampled_from([(9, 3), (4, 4), (2, 1)]), head_dim=st.sampled_from([8, 64]),
       seed=st.integers(0, 2**16))
@example(rows=1, heads=(9, 3), head_dim=64, seed=0)
@example(rows=300, heads=(9, 3), head_dim=64, seed=1)
def test_rotary_turns_q_and_k_where_they_lie_in_a_merged_projections_rows(rows, heads, head_dim, seed):
    g = torch.Generator().manual_seed(seed)
    q_width, kv_width = heads[0] * head_dim, heads[1] * head_dim
    qkv = torch.randn(rows, q_width + 2 * kv_width, generator=g)
    v_before = qkv[:, q_width + kv_width:].clone()
    q, k = qkv[:, :q_width].view(rows, *heads[:1], head_dim), qkv[:, q_width:q_width + kv_width].view(rows, heads[1], head_dim)
    cos, sin = _angles(rows, head_dim, g)
    expected_q, expected_k = TORCH.rotary(q.clone(), k.clone(), cos, sin)
    ops = CpuLayerOps()
    got_q, got_k = ops.rotary(q, k, cos, sin)
    assert ops.calls["rotary"] == 1, "slices of a merged output, rows apart by its width, run in the loop"
    torch.testing.assert_close(got_q, expected_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, expected_k, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(qkv[:, :q_width], expected_q.reshape(rows, -1), msg="q turned in place")
    assert torch.equal(qkv[:, q_width + kv_width:], v_before), "v, beside them, untouched"


def _merged(sizes, hidden, bias, g):
    members = []
    for size in sizes:
        linear = torch.nn.Linear(hidden, size, bias=bias)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=g) / hidden ** 0.5)
            if bias:
                linear.bias.copy_(torch.randn(size, generator=g))
        members.append(PackedLinear(linear, pack=False))
    group = MergedLinears(members)
    for member in members:
        member.merged = group
    return members, group


needs_onednn = pytest.mark.skipif(not packing_available("cpu", torch.float32), reason="torch was built without oneDNN")


@needs_onednn
@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 200), width=st.sampled_from([40, 1536]), bias=st.booleans(), seed=st.integers(0, 2**16))
@example(rows=1, width=1536, bias=False, seed=0)  # one decode row: torch's two ops
@example(rows=200, width=1536, bias=True, seed=1)  # a chunk: the loop, threaded
def test_swiglu_over_a_merged_gate_up_equals_the_torch_version(rows, width, bias, seed):
    g = torch.Generator().manual_seed(seed)
    (gate, up), group = _merged([width, width], 48, bias, g)
    x = torch.randn(rows, 48, generator=g)
    ops = CpuLayerOps()
    with torch.inference_mode():
        got = ops.swiglu(x, gate, up, lambda h: h * 2)
        expected = TORCH.swiglu(x, gate.linear, up.linear, lambda h: h * 2)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert group.calls == 1 and gate.calls == up.calls == 0, "one merged matmul, not two"
    assert ops.calls["swiglu"] == (rows * width >= 4096), "the loop takes the chunks, torch the small ones"


@needs_onednn
def test_project_runs_a_merged_group_as_one_matmul_and_anything_else_one_by_one():
    g = torch.Generator().manual_seed(0)
    (q, k, v), group = _merged([36, 12, 12], 20, True, g)
    x, ops = torch.randn(5, 20, generator=g), CpuLayerOps()
    with torch.inference_mode():
        got = ops.project(x, q, k, v)
        for out, member in zip(got, (q, k, v)):
            torch.testing.assert_close(out, member.linear(x), rtol=1e-4, atol=1e-4)
        assert group.calls == 1 and ops.calls["project"] == 1
        assert len(ops.project(x, q, k)) == 2 and group.calls == 1, "not the whole group: each layer alone"
        assert len(ops.project(x, k, q, v)) == 3 and group.calls == 1, "not in the group's order: each layer alone"


def test_what_the_loops_do_not_take_goes_to_torch_and_is_not_counted():
    ops = CpuLayerOps()
    x64, w64 = torch.randn(4, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    torch.testing.assert_close(ops.rms_norm(x64, w64, 1e-5)[0], TORCH.rms_norm(x64, w64, 1e-5)[0])
    q = torch.randn(8, 4, 2).transpose(0, 2)  # [2, 4, 8], not contiguous
    cos, sin = _angles(2, 8, torch.Generator().manual_seed(0))
    expected = TORCH.rotary(q, q, cos, sin)[0]
    torch.testing.assert_close(ops.rotary(q, q, cos, sin)[0], expected)
    x = torch.randn(2, 8, requires_grad=True)  # training: autograd must see the ops
    ops.rms_norm(x, torch.ones(8), 1e-5)[0].sum().backward()
    assert x.grad is not None
    assert ops.calls == {"rms_norm": 0, "rotary": 0, "swiglu": 0, "project": 0}
    assert CpuLayerOps(library=None).library is not None, "None means: load the library"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    save_tiny_model("llama", path)
    return load_model(path)


def test_the_cpu_backend_runs_every_layer_of_the_step_through_the_loops(tiny):
    engine = LLMEngine(tiny, EngineConfig(attention_backend="cpu"))
    assert isinstance(tiny.ops, CpuLayerOps)
    long_prompt = [(7 * i) % 300 + 1 for i in range(60)]  # 60 rows x 96 wide: big enough for the SwiGLU loop
    engine.generate([long_prompt, [5, 6]], SamplingParams(max_tokens=3, ignore_eos=True))
    calls, layers = tiny.ops.calls, tiny.config.num_layers
    steps = calls["rotary"] // layers
    assert steps >= 3 and calls["rotary"] == steps * layers, "every layer of every step"
    assert calls["rms_norm"] == steps * (2 * layers + 1), "two per layer and the final one"
    assert calls["swiglu"] >= layers, "the prefill step's MLPs went through the loop (decode rows are too small)"
    assert calls["project"] == steps * layers, "q/k/v as one merged matmul in every layer of every step"
    LLMEngine(tiny, EngineConfig(attention_backend="torch"))
    assert type(tiny.ops) is LayerOps, "the torch backend keeps chapter 0's layers"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_is_told_to_keep_freed_memory_once_the_cpu_backend_is_used(tiny):
    LLMEngine(tiny, EngineConfig(attention_backend="cpu"))
    assert keep_freed_memory.cache_info().currsize == 1, "set by the cpu backend"
    assert keep_freed_memory() is True, "glibc accepted both thresholds"
