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
    """Root-mean-square normalisation over the last dimension, then a learned scale.

    Computed in float32 whatever the input dtype (a bf16 sum of squares loses
    too much), and cast back before the scale, as Llama does.
    """
    # Hint: x32 = x.float(); divide x32 by sqrt(mean(x32**2 over the last dim) + eps)
    # (torch.rsqrt), cast back to x.dtype, then multiply by weight.
    # BEGIN SOLUTION 0.1: RMSNorm
    x32 = x.float()
    variance = x32.pow(2).mean(dim=-1, keepdim=True)
    normed = x32 * torch.rsqrt(variance + eps)
    return weight * normed.to(x.dtype)
    # END SOLUTION
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


def rope_cos_sin(config: ModelConfig, positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's angles, shape [num_tokens, head_dim] (float32)."""
    freqs = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([freqs, freqs], dim=-1)
    return angles.cos(), angles.sin()


# ANCHOR: apply_rotary
def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each head's (first half, second half) dimension pairs by its position's angle.

    x: [num_tokens, num_heads, head_dim]; cos, sin: [num_tokens, head_dim].
    This is the Hugging Face "rotate half" layout: dimension i is paired with
    dimension i + head_dim / 2. Meta's and GGUF checkpoints pair neighbours
    (2i, 2i+1); converting them permutes the q/k projection rows to this layout.
    """
    # Hint: with x1, x2 = the two halves of the last dim, rotate_half(x) is cat(-x2, x1);
    # the result is x * cos + rotate_half(x) * sin, with cos/sin broadcast over heads
    # (unsqueeze dim 1). Compute in float32 and cast back to x.dtype.
    # BEGIN SOLUTION 0.2: Rotary position embedding
    x32 = x.float()
    half = x.shape[-1] // 2
    rotated = torch.cat([-x32[..., half:], x32[..., :half]], dim=-1)
    return (x32 * cos[:, None, :] + rotated * sin[:, None, :]).to(x.dtype)
    # END SOLUTION
# ANCHOR_END: apply_rotary


# ANCHOR: swiglu
def swiglu(x: torch.Tensor, gate_proj, up_proj, down_proj) -> torch.Tensor:
    """The gated MLP of Llama-family models: down(silu(gate(x)) * up(x)).

    The projections are callables (nn.Linear modules) so biases come for free.
    """
    # Hint: torch.nn.functional.silu is x * sigmoid(x).
    # BEGIN SOLUTION 0.3: SwiGLU MLP
    return down_proj(torch.nn.functional.silu(gate_proj(x)) * up_proj(x))
    # END SOLUTION
# ANCHOR_END: swiglu
