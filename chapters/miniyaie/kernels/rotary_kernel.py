"""Rotary position embedding (neox / "rotate half" layout), applied to q and k in place.

Dimension i of a head pairs with dimension i + head_dim/2; the pair turns by
its position's angle. One program handles one token: it loads cos/sin once
and rotates every query and key head of that token.
"""

from __future__ import annotations

import torch

from miniyaie.kernels._triton import tl, triton


def rotary_reference(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """In place: q [tokens, heads, dim], k [tokens, kv_heads, dim]; cos, sin [tokens, dim] float32."""
    for x in (q, k):
        x32 = x.float()
        half = x.shape[-1] // 2
        rotated = torch.cat([-x32[..., half:], x32[..., :half]], dim=-1)
        x.copy_(x32 * cos[:, None, :] + rotated * sin[:, None, :])


# ANCHOR: rotary_kernel
@triton.jit
def _rotate_heads(x_ptr, stride_t, stride_h, token, c, s, NUM_HEADS: tl.constexpr, HEADS_PAD: tl.constexpr,
                  HALF: tl.constexpr, HALF_PAD: tl.constexpr):
    """Rotate, in place, the NUM_HEADS heads of row `token` of x (q or k) as rotary_reference does.

    c and s are this token's cos and sin, HALF_PAD values (valid below HALF =
    head_dim / 2); head h starts at x_ptr + token * stride_t + h * stride_h. Within
    the chapter's tolerance for x's dtype; padded heads and columns are neither
    read nor written.
    """
    # Idea: which dimension does each one rotate with, and what must be read before anything is written?
    # Stuck? `miniyaie hint 4.2` prints hints, one level at a time.
    # TODO(Task 4.2): The layer's elementwise kernels. Replace this line with your code.
    raise NotImplementedError("Chapter 4, Task 2: The layer's elementwise kernels — see book/src/ch04_triton_kernels.md")


@triton.jit
def _rotary_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, stride_qt, stride_qh, stride_kt, stride_kh, stride_ct,
    NUM_Q_HEADS: tl.constexpr, NUM_K_HEADS: tl.constexpr, Q_HEADS_PAD: tl.constexpr, K_HEADS_PAD: tl.constexpr,
    HALF: tl.constexpr, HALF_PAD: tl.constexpr,
):
    token = tl.program_id(0)
    cols = tl.arange(0, HALF_PAD)
    c = tl.load(cos_ptr + token * stride_ct + cols, mask=cols < HALF, other=1.0)
    s = tl.load(sin_ptr + token * stride_ct + cols, mask=cols < HALF, other=0.0)
    _rotate_heads(q_ptr, stride_qt, stride_qh, token, c, s, NUM_Q_HEADS, Q_HEADS_PAD, HALF, HALF_PAD)
    _rotate_heads(k_ptr, stride_kt, stride_kh, token, c, s, NUM_K_HEADS, K_HEADS_PAD, HALF, HALF_PAD)
# ANCHOR_END: rotary_kernel


def rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Triton version of rotary_reference (in place; last dimension contiguous)."""
    num_tokens, num_q_heads, head_dim = q.shape
    if q.stride(2) != 1 or k.stride(2) != 1 or cos.stride(1) != 1 or cos.stride() != sin.stride():
        raise ValueError("rotary needs contiguous head dims and cos/sin of one layout")
    if num_tokens == 0:
        return
    half = head_dim // 2
    _rotary_kernel[(num_tokens,)](
        q, k, cos, sin, q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos.stride(0),
        NUM_Q_HEADS=num_q_heads, NUM_K_HEADS=k.shape[1],
        Q_HEADS_PAD=triton.next_power_of_2(num_q_heads), K_HEADS_PAD=triton.next_power_of_2(k.shape[1]),
        HALF=half, HALF_PAD=triton.next_power_of_2(half),
    )
