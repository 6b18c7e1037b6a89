"""Task 4.2: neox-style rotary embedding, in place on q and k."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kernel_cases import assert_close, dtypes, generator

from miniyaie.kernels import rotary, rotary_reference
from miniyaie.model import ModelConfig, apply_rotary, rope_cos_sin, rope_inverse_frequencies


def cos_sin(head_dim: int, positions: torch.Tensor):
    config = ModelConfig(
        family="llama", vocab_size=8, hidden_size=head_dim, intermediate_size=8, num_layers=1, num_heads=1,
        num_kv_heads=1, head_dim=head_dim, rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling={},
        max_position_embeddings=4096, tie_word_embeddings=False,
    )
    return rope_cos_sin(config, positions, rope_inverse_frequencies(config).to(positions.device))


@pytest.mark.task("4.2")
@settings(max_examples=15)
@given(num_tokens=st.integers(1, 8), heads=st.sampled_from([(1, 1), (9, 3), (8, 2)]),
       head_dim=st.sampled_from([24, 64, 80, 96]), dtype=dtypes, seed=st.integers(0, 2**16))
@example(num_tokens=1, heads=(1, 1), head_dim=64, dtype=torch.float32, seed=0)
def test_rotary_in_place_matches_reference(num_tokens, heads, head_dim, dtype, seed):
    gen = generator(seed)
    positions = torch.randint(0, 4000, (num_tokens,), generator=gen)
    cos, sin = cos_sin(head_dim, positions)
    q = torch.randn(num_tokens, heads[0], head_dim, generator=gen).to(dtype)
    k = torch.randn(num_tokens, heads[1], head_dim, generator=gen).to(dtype)
    q_ref, k_ref = q.clone(), k.clone()
    assert rotary(q, k, cos, sin) is None  # in place
    rotary_reference(q_ref, k_ref, cos, sin)
    assert_close(q, q_ref, dtype)
    assert_close(k, k_ref, dtype)


@pytest.mark.task("4.2")
def test_rotary_equals_chapter0_apply_rotary():
    positions = torch.tensor([0, 1, 17, 300])
    cos, sin = cos_sin(64, positions)
    q, k = torch.randn(4, 6, 64), torch.randn(4, 2, 64)
    expected_q, expected_k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    rotary(q, k, cos, sin)
    torch.testing.assert_close(q, expected_q)
    torch.testing.assert_close(k, expected_k)
