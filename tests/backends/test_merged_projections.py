"""Merged q/k/v and gate/up matmuls (miniyaie/backends/merged_projections.py): provided machinery, not a task.

Only the matmuls merge: the activation must still be the wrapped ops' own, so
that under the triton backend chapter 4's SiLU-and-mul kernel runs on the
merged path too (the GPU's decode path, where every step takes it).
"""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from miniyaie.backends.merged_projections import MergedProjectionOps, merge_projections
from miniyaie.model import LayerOps

pytestmark = pytest.mark.ungraded


class CountingOps(LayerOps):
    """Chapter 0's ops, counting the activations they apply (as TritonLayerOps counts its kernels)."""

    def __init__(self):
        self.calls = {"swiglu": 0}

    def swiglu(self, x, gate_proj, up_proj, down_proj):
        self.calls["swiglu"] += 1
        return super().swiglu(x, gate_proj, up_proj, down_proj)


def one_layer_model(hidden: int = 8, inner: int = 12):
    torch.manual_seed(0)
    attn = SimpleNamespace(q_proj=nn.Linear(hidden, hidden), k_proj=nn.Linear(hidden, 4), v_proj=nn.Linear(hidden, 4))
    mlp = SimpleNamespace(gate_proj=nn.Linear(hidden, inner, bias=False), up_proj=nn.Linear(hidden, inner, bias=False),
                          down_proj=nn.Linear(inner, hidden, bias=False))
    return SimpleNamespace(model=SimpleNamespace(layers=[SimpleNamespace(self_attn=attn, mlp=mlp)]))


@torch.no_grad()
def test_merged_swiglu_runs_the_wrapped_ops_activation_and_computes_the_same():
    model = one_layer_model()
    mlp, x = model.model.layers[0].mlp, torch.randn(3, 8)
    expected = LayerOps().swiglu(x, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    assert merge_projections(model) == 2
    inner = CountingOps()
    ops = MergedProjectionOps(inner)
    got = ops.swiglu(x, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    assert ops.merged_calls["swiglu"] == 1, "the merged gate/up matmul ran"
    assert inner.calls["swiglu"] == 1, "the wrapped ops' own activation (chapter 4's kernel under triton) ran"
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_merged_projections_give_the_separate_outputs():
    model = one_layer_model()
    attn, x = model.model.layers[0].self_attn, torch.randn(5, 8)
    expected = [p(x) for p in (attn.q_proj, attn.k_proj, attn.v_proj)]
    merge_projections(model)
    ops = MergedProjectionOps(LayerOps())
    got = ops.project(x, attn.q_proj, attn.k_proj, attn.v_proj)
    assert ops.merged_calls["project"] == 1
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
