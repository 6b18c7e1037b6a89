"""The small functions a decoder layer is made of: RMSNorm, RoPE, SwiGLU.

Each is a plain function over tensors, so that it can be tested alone; the
modules in transformer.py only hold the weights and call these.
"""

from __future__ import annotations

import math

import torch

from miniyaie.model.config import ModelConfig


# ANCHOR: rms_norm
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension, then the learned per-feature scale `weight` (x's dtype).

    Each row comes out with a root mean square of 1 before the scale; no mean
    is subtracted; eps, added to the mean square, keeps a zero row at zero.
    Same shape and dtype as x. On bfloat16 input: the same bits as transformers'
    LlamaRMSNorm (the checkpoints' code) in all but rare elements (under 1%, one
    unit in the last place). Asserted: that, the float64 definition to 1e-5 in
    float32, rms_norm(c * x) == rms_norm(x) for c > 0, rms_norm(zeros) == zeros.
    """
    # Idea: a bfloat16 result can be rounded at several points: which steps run in which dtype?
    # Stuck? `miniyaie hint 0.1` prints hints, one level at a time.
    # TODO(Task 0.1): RMSNorm and SwiGLU in the checkpoint's precision. Replace this line with your code.
    raise NotImplementedError("Chapter 0, Task 1: RMSNorm and SwiGLU in the checkpoint's precision — see book/src/ch00_model.md")
# ANCHOR_END: rms_norm


# ANCHOR: rope_frequencies
def rope_inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    """One rotation speed per pair of dimensions, with the config's rope scaling applied.

    Dimension pair i turns by position * inv_freq[i] radians. "linear" scaling
    divides every pair's speed by `factor`; "llama3" divides only the
    low-frequency (long-wavelength) pairs by `factor`, keeps the
    high-frequency ones, and blends smoothly between the two in the middle band.
    """
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim))
    scaling = config.rope_scaling
    kind = scaling.get("rope_type", "default")
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_context = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old_context / high) & ~(wavelen > old_context / low)
        inv_freq = torch.where(medium, blended, scaled)
    return inv_freq
# ANCHOR_END: rope_frequencies


# ANCHOR: rope_cos_sin
def rope_cos_sin(config: ModelConfig, positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every token's rotation angles: two float32 tensors [num_tokens, head_dim].

    positions: [num_tokens], any integer dtype; inv_freq: [head_dim / 2], config's rope scaling included: pair k
    turns by position * inv_freq[k] (apply_rotary's docstring says which dimensions form pair k). Row t is token t;
    column c holds the cos (sin) of the angle dimension c turns by (apply_rotary and chapter 4's kernels read
    it). Float32 whatever the model's dtype: angles reach thousands of radians, and in bfloat16 (8 significant
    bits) position 4,001 would be 4,000, its angle off by radians. Asserted: transformers' tables.
    """
    # Idea: dimension c belongs to one pair: which pair, and so which of the head_dim / 2 speeds is column c's?
    # Stuck? `miniyaie hint 0.2` prints hints, one level at a time.
    # TODO(Task 0.2): Rotary position embedding. Replace this line with your code.
    raise NotImplementedError('Chapter 0, Task 2: Rotary position embedding — see book/src/ch00_model.md')
# ANCHOR_END: rope_cos_sin


# ANCHOR: apply_rotary
def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate every head of every token by its token's angles (the Hugging Face "rotate half" layout).

    x: [num_tokens, num_heads, head_dim]; cos, sin: [num_tokens, head_dim] as rope_cos_sin lays them out. Dimension
    i pairs with i + head_dim/2; read as the complex number x[i] + j*x[i + head_dim/2], the pair is multiplied by
    e^(j*a), a being its angle. Returns x's shape and dtype, computed in float32 and rounded once (transformers' Llama
    rotates in the model's dtype: in bfloat16, four roundings that change a third of the elements). Asserted: the
    complex definition and transformers' apply_rotary_pos_emb to 1e-4, norms kept, a score unchanged when both
    positions shift alike, and on bfloat16 x the exact rotation rounded once but for rare elements (under 1%).
    """
    # Idea: the heads share their token's angles: how do cos and sin meet a tensor with a heads dimension?
    # Stuck? `miniyaie hint 0.2` prints hints, one level at a time.
    # TODO(Task 0.2): Rotary position embedding. Replace this line with your code.
    raise NotImplementedError('Chapter 0, Task 2: Rotary position embedding — see book/src/ch00_model.md')
# ANCHOR_END: apply_rotary


# ANCHOR: swiglu
def swiglu(x: torch.Tensor, gate_proj, up_proj, down_proj) -> torch.Tensor:
    """The gated MLP of Llama-family models (SwiGLU, as the chapter's overview writes it): [..., hidden] in and out.

    The projections are callables (nn.Linear modules, with or without bias):
    call them, never read their weights (other backends swap them for
    merged or sharded ones). Asserted against the definition to 1e-5.
    """
    # Idea: which projection goes through the activation, and what multiplies what?
    # Stuck? `miniyaie hint 0.1` prints hints, one level at a time.
    # TODO(Task 0.1): RMSNorm and SwiGLU in the checkpoint's precision. Replace this line with your code.
    raise NotImplementedError("Chapter 0, Task 1: RMSNorm and SwiGLU in the checkpoint's precision — see book/src/ch00_model.md")
# ANCHOR_END: swiglu


# ANCHOR: layer_ops
class LayerOps:
    """The element-wise layers a decoder calls, in one object so a backend can swap in fused kernels.

    The model calls these, never the functions above directly; chapter 4's
    TritonLayerOps overrides them. rms_norm also adds a residual when given
    one and returns (normalised sum, sum), so the add can be fused into the norm.
    `project` runs several projections of the same input (q, k and v), so that
    a backend can do them as one matmul (the cpu backend's CpuLayerOps does).
    """

    def project(self, x, *projections) -> tuple[torch.Tensor, ...]:
        return tuple(projection(x) for projection in projections)

    def rms_norm(self, x, weight, eps: float, residual=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms_norm of s, s) where s is x, or x + residual when a residual is given."""
        # Idea: what is normalised when a residual comes along, and what is handed back beside it?
        # Stuck? `miniyaie hint 0.1` prints hints, one level at a time.
        # TODO(Task 0.1): RMSNorm and SwiGLU in the checkpoint's precision. Replace this line with your code.
        raise NotImplementedError("Chapter 0, Task 1: RMSNorm and SwiGLU in the checkpoint's precision — see book/src/ch00_model.md")

    def rotary(self, q, k, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)

    def swiglu(self, x, gate_proj, up_proj, down_proj) -> torch.Tensor:
        return swiglu(x, gate_proj, up_proj, down_proj)
# ANCHOR_END: layer_ops
