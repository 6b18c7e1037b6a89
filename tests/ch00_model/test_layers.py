"""Task 0.1: RMSNorm, SwiGLU and the fused residual norm; Task 0.2: RoPE; each against its mathematical
definition and against transformers' own code, which the checkpoints were trained with."""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.model import LayerOps, ModelConfig, apply_rotary, rms_norm, rope_cos_sin, rope_inverse_frequencies, swiglu

shapes = st.tuples(st.integers(1, 5), st.integers(1, 48))


@pytest.mark.task("0.1")
@given(
    shape=shapes, seed=st.integers(0, 2**16), dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    eps=st.sampled_from([1e-6, 0.5, 4.0]),
)
@example(shape=(1, 1), seed=0, dtype=torch.float32, eps=1e-6)
@example(shape=(3, 64), seed=1, dtype=torch.bfloat16, eps=1e-6)
@example(shape=(2, 16), seed=2, dtype=torch.float32, eps=4.0)  # eps as large as the mean square: where it goes matters
def test_rms_norm_matches_definition(shape, seed, dtype, eps):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    weight = torch.randn(shape[-1], generator=g).to(dtype)
    x64 = x.double()
    expected = weight.double() * (x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps))
    out = rms_norm(x, weight, eps)
    assert out.shape == x.shape and out.dtype == dtype, f"same shape and dtype as x: got {tuple(out.shape)} {out.dtype}"
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        out.double(), expected, **tol,
        msg=lambda m: f"RMSNorm over the last dimension, times weight (eps {eps}: added to the mean square, under the root): {m}",
    )


@pytest.mark.task("0.1")
@given(scale=st.floats(0.01, 100), seed=st.integers(0, 2**16))
def test_rms_norm_is_scale_invariant(scale, seed):
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(seed))
    weight = torch.ones(32)
    torch.testing.assert_close(rms_norm(x * scale, weight, 1e-12), rms_norm(x, weight, 1e-12), rtol=1e-4, atol=1e-4)
    zeros = rms_norm(torch.zeros(2, 8), torch.ones(8), 1e-6)
    assert torch.equal(zeros, torch.zeros(2, 8)), "eps keeps an all-zero row finite"


@pytest.mark.task("0.1")
@given(hidden=st.sampled_from([64, 576, 1000]), seed=st.integers(0, 2**16), eps=st.sampled_from([1e-6, 1e-5]))
@example(hidden=576, seed=0, eps=1e-5)  # SmolLM2's width
def test_rms_norm_rounds_like_the_checkpoints_code(hidden, seed, eps):
    """In bfloat16, the same bits as transformers' LlamaRMSNorm but for rare last-bit differences."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    g = torch.Generator().manual_seed(seed)
    norm = LlamaRMSNorm(hidden, eps=eps)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(hidden, generator=g) * 0.5 + 1)
    norm = norm.to(torch.bfloat16)
    x = (torch.randn(32, hidden, generator=g) * 3).to(torch.bfloat16)
    with torch.no_grad():
        expected = norm(x)
    out = rms_norm(x, norm.weight.detach(), eps)
    assert out.dtype == torch.bfloat16, f"bfloat16 in, bfloat16 out: got {out.dtype}"
    differ = out.float() != expected.float()
    share = differ.float().mean().item()
    ulp = torch.finfo(torch.bfloat16).eps * expected.float().abs().clamp_min(torch.finfo(torch.bfloat16).tiny)
    worst = ((out.float() - expected.float()).abs() / ulp).max().item()
    assert share < 0.01 and worst <= 1, (
        f"{share:.1%} of the elements differ from transformers' LlamaRMSNorm in bfloat16 (a norm that rounds where "
        f"the checkpoint's code rounds differs in well under 1%), by up to {worst:.2f} units in the last place: "
        "which steps run in float32, and does the weight multiply before or after the result returns to bfloat16?"
    )


def _config(head_dim: int, **rope) -> ModelConfig:
    return ModelConfig(
        family="llama", vocab_size=8, hidden_size=head_dim, intermediate_size=8, num_layers=1, num_heads=1,
        num_kv_heads=1, head_dim=head_dim, rms_norm_eps=1e-6, max_position_embeddings=4096,
        rope_theta=10000.0, rope_scaling=rope,
    )


def _table(config, positions):
    """The angle table by its definition (float64 angles), as rope_cos_sin lays it out."""
    angles = positions.double()[:, None] * rope_inverse_frequencies(config).double()[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


@pytest.mark.task("0.2")
@given(
    head_dim=st.sampled_from([2, 8, 24, 80]),
    positions=st.lists(st.integers(0, 5000), min_size=1, max_size=6),
    rope=st.sampled_from([{}, {"rope_type": "linear", "factor": 4.0}]),
    int32=st.booleans(),
)
@example(head_dim=2, positions=[0], rope={}, int32=False)  # position 0: cos 1, sin 0
@example(head_dim=8, positions=[3, 1, 4000], rope={}, int32=True)
def test_rope_table_holds_each_dimensions_angle(head_dim, positions, rope, int32):
    """Row t is token t; column c holds the angle of dimension c, which turns with its partner c +/- head_dim/2."""
    config = _config(head_dim, **rope)
    pos = torch.tensor(positions, dtype=torch.int32 if int32 else torch.int64)
    cos, sin = rope_cos_sin(config, pos, rope_inverse_frequencies(config))
    assert cos.shape == sin.shape == (len(positions), head_dim), f"cos, sin are [num_tokens, head_dim], got {tuple(cos.shape)}"
    assert cos.dtype == sin.dtype == torch.float32, "cos and sin are float32"
    want_cos, want_sin = _table(config, pos.long())
    torch.testing.assert_close(cos, want_cos, rtol=1e-4, atol=1e-4, msg=lambda m: f"cos of the angle of dimension c, in column c (pair c mod head_dim/2): {m}")
    torch.testing.assert_close(sin, want_sin, rtol=1e-4, atol=1e-4, msg=lambda m: f"sin of the angle of dimension c, in column c (pair c mod head_dim/2): {m}")


@pytest.mark.task("0.2")
@given(
    head_dim=st.sampled_from([2, 8, 64, 80]),
    num_heads=st.integers(1, 3),
    positions=st.lists(st.integers(0, 4000), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
@example(head_dim=2, num_heads=1, positions=[0], seed=0)
def test_apply_rotary_matches_complex_rotation(head_dim, num_heads, positions, seed):
    """Pair (x[i], x[i + d/2]) as the complex number x[i] + j x[i + d/2]; RoPE multiplies it by cos + j sin."""
    config = _config(head_dim)
    pos = torch.tensor(positions)
    x = torch.randn(len(positions), num_heads, head_dim, generator=torch.Generator().manual_seed(seed))
    cos, sin = _table(config, pos)
    half = head_dim // 2
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    turn = torch.complex(cos[:, :half].double(), sin[:, :half].double())  # e^(j pos theta_i)
    rotated = z * turn[:, None, :]
    expected = torch.cat([rotated.real, rotated.imag], dim=-1)
    out = apply_rotary(x, cos, sin)
    assert out.shape == x.shape and out.dtype == x.dtype, f"x's shape and dtype: got {tuple(out.shape)} {out.dtype}"
    torch.testing.assert_close(
        out.double(), expected, rtol=1e-4, atol=1e-4,
        msg=lambda m: f"pair (i, i + head_dim/2 = i + {half}) of every head, read as x[i] + j*x[i + {half}], "
        f"times e^(j*angle): {m}",
    )


@pytest.mark.task("0.2")
@given(head_dim=st.sampled_from([8, 64, 80]), num_heads=st.integers(1, 4), seed=st.integers(0, 2**16))
@example(head_dim=64, num_heads=3, seed=0)  # SmolLM2's heads
def test_apply_rotary_on_bfloat16_rotates_in_float32_and_rounds_once(head_dim, num_heads, seed):
    """bfloat16 q and k, float32 tables (positions up to 4,000): the exact rotation rounded once to bfloat16, but
    for rare last-bit differences. Rounding the tables to bfloat16 and rotating in it (as transformers' Llama does)
    rounds cos, sin, both products and their sum: a third or more of the elements come out another bfloat16 value,
    up to about a unit of bfloat16 at the pair's size off."""
    g = torch.Generator().manual_seed(seed)
    config = _config(head_dim)
    pos = torch.randint(0, 4000, (64,), generator=g)
    x = (torch.randn(64, num_heads, head_dim, generator=g) * 2).to(torch.bfloat16)
    cos, sin = rope_cos_sin(config, pos, rope_inverse_frequencies(config))
    half = head_dim // 2
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    rotated = z * torch.complex(cos[:, :half].double(), sin[:, :half].double())[:, None, :]
    exact = torch.cat([rotated.real, rotated.imag], dim=-1)
    out = apply_rotary(x, cos, sin)
    assert out.dtype == torch.bfloat16, f"bfloat16 in, bfloat16 out: got {out.dtype}"
    share = (out.float() != exact.to(torch.bfloat16).float()).float().mean().item()
    # error in units of bfloat16's rounding step at the size of the pair (a rotation keeps it): rounding once
    # is off by at most half a unit; rounding cos, sin, the products and the sum adds up to several
    pair = torch.cat([z.abs(), z.abs()], dim=-1)
    unit = torch.finfo(torch.bfloat16).eps * pair.clamp_min(torch.finfo(torch.float32).tiny)
    worst = ((out.double() - exact).abs() / unit).max().item()
    assert share < 0.01 and worst <= 0.51, (
        f"{share:.1%} of the rotated elements differ from the exact rotation rounded once to bfloat16, by up to "
        f"{worst:.2f} units of bfloat16 at the pair's size (rounding once: well under 1% and at most 0.5): the "
        "rotation must run in float32 (x, cos and sin as float32) and round to x's dtype once at the end, not in "
        "x's bfloat16 with the tables rounded to it"
    )


@pytest.mark.task("0.2")
@given(m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(0, 500), seed=st.integers(0, 2**16))
def test_rotary_scores_depend_only_on_distance(m, n, shift, seed):
    """<RoPE(q, m), RoPE(k, n)> depends on m - n only, and rotation keeps vector norms."""
    config = _config(16)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, 1, 16, generator=g), torch.randn(1, 1, 16, generator=g)

    def rotate(x, position):
        cos, sin = _table(config, torch.tensor([position]))
        return apply_rotary(x, cos, sin)

    score = (rotate(q, m) * rotate(k, n)).sum()
    shifted = (rotate(q, m + shift) * rotate(k, n + shift)).sum()
    torch.testing.assert_close(score, shifted, rtol=1e-3, atol=1e-3,
                               msg=lambda m_: f"score of q at {m} and k at {n} changed when both moved by {shift}: {m_}")
    torch.testing.assert_close(rotate(q, m).norm(), q.norm(), rtol=1e-5, atol=1e-5,
                               msg=lambda m_: f"a rotation keeps the norm of q (position {m}): {m_}")


@pytest.mark.task("0.2")
@given(
    kind=st.sampled_from(["default", "linear", "llama3"]),
    head_dim=st.sampled_from([8, 24, 64]),
    positions=st.lists(st.integers(0, 3000), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
@example(kind="llama3", head_dim=64, positions=[0, 1, 2999], seed=0)
def test_rotary_matches_transformers(kind, head_dim, positions, seed):
    """The tables and the rotation of transformers' Llama (the checkpoints' convention), rope scaling included."""
    import transformers
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    rope = {
        "default": dict(rope_type="default", rope_theta=10000.0),
        "linear": dict(rope_type="linear", rope_theta=10000.0, factor=4.0),
        "llama3": dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                       high_freq_factor=4.0, original_max_position_embeddings=64),
    }[kind]
    hf_config = transformers.LlamaConfig(
        hidden_size=2 * head_dim, num_attention_heads=2, num_key_value_heads=1, head_dim=head_dim,
        max_position_embeddings=4096, rope_parameters=rope,
    )
    config = ModelConfig.from_hf(hf_config)
    pos = torch.tensor(positions)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(len(positions), 2, head_dim, generator=g), torch.randn(len(positions), 1, head_dim, generator=g)
    with torch.no_grad():
        want_cos, want_sin = LlamaRotaryEmbedding(hf_config)(q, pos[None, :])
        want_q, want_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], want_cos, want_sin)
    cos, sin = rope_cos_sin(config, pos, rope_inverse_frequencies(config))
    for name, got, want in (("cos", cos, want_cos[0]), ("sin", sin, want_sin[0])):
        torch.testing.assert_close(
            got, want.float(), rtol=1e-4, atol=1e-4,
            msg=lambda m: f"{name} table ({kind} rope, head_dim {head_dim}) differs from transformers': column c holds the "
            f"angle of dimension c, and dimension c turns with its partner c +/- {head_dim // 2} (rotate half): {m}",
        )
    for name, x, want in (("q", q, want_q), ("k", k, want_k)):
        torch.testing.assert_close(
            apply_rotary(x, want_cos[0], want_sin[0]), want[0].transpose(0, 1), rtol=1e-4, atol=1e-4,
            msg=lambda m: f"{name} rotated with transformers' tables differs from transformers' apply_rotary_pos_emb: {m}",
        )


@pytest.mark.task("0.1")
@given(tokens=st.integers(1, 5), hidden=st.integers(1, 24), inner=st.integers(1, 40), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_swiglu_matches_definition(tokens, hidden, inner, bias, seed):
    torch.manual_seed(seed)
    gate, up = torch.nn.Linear(hidden, inner, bias=bias), torch.nn.Linear(hidden, inner, bias=bias)
    down = torch.nn.Linear(inner, hidden, bias=bias)
    x = torch.randn(tokens, hidden)
    with torch.no_grad():
        g = gate(x)
        expected = down(g * torch.sigmoid(g) * up(x))
        torch.testing.assert_close(swiglu(x, gate, up, down), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.task("0.1")
@given(
    tokens=st.integers(1, 4), hidden=st.integers(1, 16), with_residual=st.booleans(), seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)
@example(tokens=2, hidden=8, with_residual=True, seed=0, dtype=torch.float32)
@example(tokens=2, hidden=8, with_residual=False, seed=0, dtype=torch.float32)
@example(tokens=3, hidden=16, with_residual=True, seed=1, dtype=torch.bfloat16)
def test_layer_ops_norm_adds_the_residual_first(tokens, hidden, with_residual, seed, dtype):
    """LayerOps.rms_norm(x, w, eps, residual) is (rms_norm(x + residual), x + residual); without one, (rms_norm(x), x).

    The stream stays in the model's dtype: in bfloat16, the sum is the bfloat16 sum."""
    g = torch.Generator().manual_seed(seed)
    x, residual, weight = (torch.randn(shape, generator=g).to(dtype) for shape in ((tokens, hidden), (tokens, hidden), (hidden,)))
    summed = x + residual if with_residual else x
    normed, out_sum = LayerOps().rms_norm(x, weight, 1e-6, residual if with_residual else None)
    assert out_sum.dtype == normed.dtype == dtype, f"both values stay in the stream's dtype {dtype}: got {out_sum.dtype}, {normed.dtype}"
    torch.testing.assert_close(out_sum, summed, rtol=0, atol=0,
                               msg=lambda m: f"the second value is the stream {'x + residual' if with_residual else 'x'} in {dtype}: {m}")
    torch.testing.assert_close(normed, rms_norm(summed, weight, 1e-6), msg=lambda m: f"the first value is rms_norm of that stream: {m}")
