"""The cpu backend's linear layers: oneDNN with packed weights, equal to F.linear up to rounding, on the hot path."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tiny_models import save_tiny_model

from miniyaie.backends.cpu.linear import MergedLinears, PackedLinear, pack_linears, packing_available, unpack_linears
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import SamplingParams, load_model

pytestmark = [
    pytest.mark.ungraded,
    pytest.mark.skipif(not packing_available("cpu", torch.float32), reason="torch was built without oneDNN"),
]


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 300), sizes=st.sampled_from([(8, 8), (64, 24), (576, 192), (33, 97)]),
       bias=st.booleans(), leading=st.sampled_from([(), (2,)]), seed=st.integers(0, 2**16))
@example(rows=1, sizes=(576, 192), bias=False, leading=(), seed=0)  # one decode row
@example(rows=300, sizes=(33, 97), bias=True, leading=(2,), seed=1)  # odd sizes, a batch dimension
def test_a_packed_linear_computes_what_f_linear_computes(rows, sizes, bias, leading, seed):
    g = torch.Generator().manual_seed(seed)
    linear = torch.nn.Linear(*sizes, bias=bias)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(linear.weight.shape, generator=g))
        if bias:
            linear.bias.copy_(torch.randn(linear.bias.shape, generator=g))
    x = torch.randn(*leading, rows, sizes[0], generator=g)
    packed = PackedLinear(linear)
    with torch.inference_mode():
        got, expected = packed(x), F.linear(x, linear.weight, linear.bias)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4 * sizes[0] ** 0.5)
    assert packed.weight is linear.weight and packed.calls == 1


def test_packing_swaps_plain_linears_only_and_unpacking_restores_them():
    class Sharded(torch.nn.Linear):  # a layer with its own forward (a tensor-parallel one) is left alone
        pass

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), Sharded(4, 4), torch.nn.Sequential(torch.nn.Linear(4, 2)))
    originals = [model[0], model[3][0]]
    assert pack_linears(model) == 2
    assert isinstance(model[0], PackedLinear) and isinstance(model[3][0], PackedLinear) and type(model[2]) is Sharded
    assert pack_linears(model) == 0, "packing twice packs nothing more"
    assert unpack_linears(model) == 2
    assert [model[0], model[3][0]] == originals


def test_projections_of_one_input_are_merged_and_compute_what_they_did():
    class Block(torch.nn.Module):
        def __init__(self, bias_on_v: bool):
            super().__init__()
            self.q_proj, self.k_proj = torch.nn.Linear(16, 8), torch.nn.Linear(16, 4)
            self.v_proj = torch.nn.Linear(16, 4, bias=bias_on_v)
            self.gate_proj, self.up_proj = torch.nn.Linear(16, 24, bias=False), torch.nn.Linear(16, 24, bias=False)

    model = torch.nn.ModuleList([Block(True), Block(False)])
    originals = [dict(block.named_children()) for block in model]
    x = torch.randn(3, 16)
    with torch.inference_mode():
        expected = [[layer(x) for layer in block.values()] for block in originals]
    assert pack_linears(model) == 10 and pack_linears(model) == 0
    first, second = model
    assert first.q_proj.merged is first.k_proj.merged is first.v_proj.merged is not None
    assert first.gate_proj.merged is first.up_proj.merged is not first.q_proj.merged
    assert second.q_proj.merged is None and second.gate_proj.merged is not None, "q/k/v with and without bias: not merged"
    with torch.inference_mode():
        for block, want in zip(model, expected):
            for name, out in zip(["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"], want):
                layer = getattr(block, name)
                got = layer.merged(x)[layer.merged.members.index(layer)] if layer.merged else layer(x)
                torch.testing.assert_close(got, out, rtol=1e-4, atol=1e-4, msg=name)
                torch.testing.assert_close(layer(x), out, rtol=1e-4, atol=1e-4, msg=f"{name} called alone")
    assert unpack_linears(model) == 10
    assert [dict(block.named_children()) for block in model] == originals


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    save_tiny_model("llama", path)
    return load_model(path)


def test_the_cpu_backend_runs_every_linear_of_the_step_packed_and_the_others_unpack(tiny):
    model = tiny
    engine = LLMEngine(model, EngineConfig(attention_backend="cpu"))
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    plain = [m for m in model.modules() if type(m) is torch.nn.Linear and not any(m is p.linear for p in packed)]
    assert packed and not plain, "every nn.Linear of the model is packed"
    merged = {id(p.merged): p.merged for p in packed if p.merged is not None}.values()
    assert len(merged) == 2 * model.config.num_layers, "q/k/v and gate/up merged in every layer"
    assert all(isinstance(group, MergedLinears) and group.packed is not None for group in merged)
    assert all(p.packed is None for p in packed if p.merged), "a merged layer keeps no second packed copy"
    engine.generate([[1, 2, 3, 4]], SamplingParams(max_tokens=3, ignore_eos=True))
    assert all(p.calls > 0 for p in packed if p.merged is None), "each packed layer ran in the engine's steps"
    assert all(group.calls > 0 for group in merged), "each merged group ran in the engine's steps"
    assert not any(p.calls for p in packed if p.merged), "merged layers ran in their group, not one by one"
    LLMEngine(model, EngineConfig(attention_backend="torch"))
    assert not any(isinstance(m, PackedLinear) for m in model.modules()), "the torch backend runs the model as written"
